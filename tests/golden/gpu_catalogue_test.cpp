// The built-in GPU catalogue, read from data/gpus/*.toml, against gpu_catalogue.json: every
// figure of every card as the compiled-in C++ table had it before the cards became data files
// (generated once from that build), compared bit for bit. A card file that does not read, a
// figure that drifts by one rounding, a lost alias or a changed order fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "hardware/gpu_card.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

json golden() {
  std::ifstream in(TRAINFIT_SOURCE_DIR "/tests/golden/gpu_catalogue.json");
  EXPECT_TRUE(in) << "tests/golden/gpu_catalogue.json missing";
  return json::parse(in);
}

// Every card file the build embedded reads as a catalogue card, named by its file and line when
// it does not: a malformed card cannot pass the test suite.
TEST(GpuCatalogueFiles, EveryEmbeddedCardReads) {
  ASSERT_FALSE(detail::embedded_gpu_specs().empty());
  for (const auto& [stem, text] : detail::embedded_gpu_specs()) {
    const std::string source = "data/gpus/" + std::string(stem) + ".toml";
    try {
      const detail::GpuCard card = detail::read_gpu_card(text, source, detail::GpuSpecKind::catalogue);
      EXPECT_EQ(card.spec.id, stem) << source;
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
    }
  }
  EXPECT_NO_THROW((void)gpu_catalog());
}

// The build embeds data/gpus/*.toml as they were when it was configured; a card file added
// since must not be silently missing from the binary.
TEST(GpuCatalogueFiles, EveryFileOnDiskIsEmbedded) {
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(TRAINFIT_SOURCE_DIR "/data/gpus")) {
    if (entry.is_regular_file() && entry.path().extension() == ".toml") on_disk.insert(entry.path().stem().string());
  }
  std::set<std::string> embedded;
  for (const auto& [stem, text] : detail::embedded_gpu_specs()) embedded.insert(std::string(stem));
  EXPECT_EQ(on_disk, embedded);
}

TEST(GpuCatalogueGolden, EveryFigureAsTheCompiledInTableHadIt) {
  const json cards = golden();
  const auto& catalog = gpu_catalog();
  ASSERT_EQ(catalog.size(), cards.size());
  for (std::size_t i = 0; i < cards.size(); ++i) {
    const json& want = cards[i];
    const GpuSpec& g = catalog[i];
    SCOPED_TRACE(want["id"].get<std::string>());
    EXPECT_EQ(g.id, want["id"]);  // and so the order `trainfit gpus` prints
    EXPECT_EQ(g.name, want["name"]);
    EXPECT_EQ(g.vendor, want["vendor"]);
    EXPECT_EQ(g.architecture, want["architecture"]);
    EXPECT_EQ(g.compute_capability_major, want["compute_capability_major"]);
    EXPECT_EQ(g.compute_capability_minor, want["compute_capability_minor"]);
    EXPECT_EQ(to_string(g.gpu_class), want["class"]);
    EXPECT_EQ(g.memory_bytes, want["memory_bytes"].get<std::int64_t>());
    // Exact: the JSON holds each double in round-trip precision, so equal means the same bits.
    EXPECT_EQ(g.memory_bandwidth_bytes_per_s, want["memory_bandwidth_bytes_per_s"].get<double>());
    EXPECT_EQ(g.fp32_flops, want["fp32_flops"].get<double>());
    EXPECT_EQ(g.tf32_flops, want["tf32_flops"].get<double>());
    EXPECT_EQ(g.bf16_flops, want["bf16_flops"].get<double>());
    EXPECT_EQ(g.fp16_flops, want["fp16_flops"].get<double>());
    EXPECT_EQ(g.fp8_flops, want["fp8_flops"].get<double>());
    EXPECT_EQ(g.int8_ops, want["int8_ops"].get<double>());
    EXPECT_EQ(g.pcie_generation, want["pcie_generation"]);
    EXPECT_EQ(g.pcie_lanes, want["pcie_lanes"]);
    EXPECT_EQ(g.host_link_bytes_per_s, want["host_link_bytes_per_s"].get<double>());
    EXPECT_EQ(g.gpu_link, want["gpu_link"]);
    EXPECT_EQ(g.gpu_link_bytes_per_s, want["gpu_link_bytes_per_s"].get<double>());
    EXPECT_EQ(g.source, want["source"]);
  }
}

// The old table's aliases (normalized spellings) still pick their cards.
TEST(GpuCatalogueGolden, EveryOldAliasPicksItsCard) {
  std::size_t aliases = 0;
  for (const json& card : golden()) {
    for (const json& alias : card["normalized_aliases"]) {
      EXPECT_EQ(find_gpu(alias.get<std::string>()).id, card["id"]) << alias;
      ++aliases;
    }
  }
  EXPECT_EQ(aliases, 14u);
}

// One reader for both: a card file given to --gpu-spec (less its aliases, which only the
// catalogue has) is the same card the catalogue holds.
TEST(GpuCatalogueFiles, ACardFileIsAValidSpecFile) {
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.id);
    std::ifstream in(TRAINFIT_SOURCE_DIR "/data/gpus/" + g.id + ".toml");
    ASSERT_TRUE(in);
    std::string text;
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("aliases")) text += line + "\n";
    }
    const GpuSpec s = parse_gpu_spec(text, "copy.toml");
    EXPECT_EQ(s.id, g.id);
    EXPECT_EQ(s.name, g.name);
    EXPECT_EQ(s.vendor, g.vendor);
    EXPECT_EQ(s.compute_capability_major, g.compute_capability_major);
    EXPECT_EQ(s.compute_capability_minor, g.compute_capability_minor);
    EXPECT_EQ(s.gpu_class, g.gpu_class);
    EXPECT_EQ(s.memory_bytes, g.memory_bytes);
    EXPECT_EQ(s.memory_bandwidth_bytes_per_s, g.memory_bandwidth_bytes_per_s);
    EXPECT_EQ(s.bf16_flops, g.bf16_flops);
    EXPECT_EQ(s.host_link_bytes_per_s, g.host_link_bytes_per_s);
    EXPECT_EQ(s.gpu_link, g.gpu_link);
    EXPECT_EQ(s.gpu_link_bytes_per_s, g.gpu_link_bytes_per_s);
    EXPECT_EQ(s.source, g.source);
  }
}

}  // namespace
}  // namespace trainfit
