// GPU spec files (TOML), base overrides, every rejection, and --vram cards.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "hardware/gpu_card.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

std::string error_of(std::string_view toml) {
  try {
    parse_gpu_spec(toml, "test.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(GpuSpecFile, FullSpec) {
  const GpuSpec g = parse_gpu_spec(R"(
id = "rtx-4000-ada"
name = "NVIDIA RTX 4000 Ada Generation"
architecture = "ada"
compute_capability = "8.9"
class = "workstation"
memory = "20GiB"
memory_bandwidth = "360GB/s"
fp32_tflops = 26.7
tf32_tflops = 53.4
bf16_tflops = 106.9
fp16_tflops = 106.9
fp8_tflops = 213.8
int8_tops = 213.8
pcie_generation = 4
pcie_lanes = 16
gpu_link = "pcie"
)",
                                   "card.toml");
  EXPECT_EQ(g.id, "rtx-4000-ada");
  EXPECT_EQ(g.name, "NVIDIA RTX 4000 Ada Generation");
  EXPECT_EQ(g.architecture, "ada");
  EXPECT_EQ(g.compute_capability_major, 8);
  EXPECT_EQ(g.compute_capability_minor, 9);
  EXPECT_EQ(g.gpu_class, GpuClass::workstation);
  EXPECT_EQ(g.memory_bytes, 20 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_bytes_per_s, 360e9);
  EXPECT_DOUBLE_EQ(g.bf16_flops, 106.9e12);
  EXPECT_DOUBLE_EQ(g.int8_ops, 213.8e12);
  EXPECT_DOUBLE_EQ(g.host_link_bytes_per_s, 32e9);  // derived from the PCIe link
  EXPECT_DOUBLE_EQ(g.gpu_link_bytes_per_s, 32e9);
  EXPECT_EQ(g.source, "card.toml");
}

TEST(GpuSpecFile, MinimalSpecNeedsOnlyMemory) {
  const GpuSpec g = parse_gpu_spec("memory = \"16303MiB\"", "m.toml");
  EXPECT_EQ(g.id, "custom");
  EXPECT_EQ(g.memory_bytes, 16303 * kMiB);
  EXPECT_EQ(g.name, "custom 15.9 GiB card");
  EXPECT_EQ(g.bf16_flops, 0);
  EXPECT_EQ(g.gpu_link, "none");
  EXPECT_EQ(parse_gpu_spec("memory_bytes = 17094934528", "m.toml").memory_bytes, 17094934528);
  EXPECT_EQ(parse_gpu_spec("memory = 1073741824", "m.toml").memory_bytes, kGiB);  // a byte count
}

TEST(GpuSpecFile, AlternativeSpellings) {
  const GpuSpec g = parse_gpu_spec(R"(
memory = "24 GB"
memory_bandwidth_bytes_per_s = 1.008e12
compute_capability = 8.9
host_link_gb_per_s = 25
gpu_link = "nvlink3"
gpu_link_gb_per_s = 56.25
)",
                                   "alt.toml");
  EXPECT_EQ(g.memory_bytes, 24'000'000'000);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_bytes_per_s, 1.008e12);
  EXPECT_EQ(g.compute_capability_major, 8);
  EXPECT_EQ(g.compute_capability_minor, 9);
  EXPECT_DOUBLE_EQ(g.host_link_bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(g.gpu_link_bytes_per_s, 56.25e9);
  EXPECT_EQ(parse_gpu_spec("memory=\"1GiB\"\ncompute_capability = 12", "x").compute_capability_major, 12);
  EXPECT_DOUBLE_EQ(parse_gpu_spec("memory=\"1GiB\"\nmemory_bandwidth = \"4.8 TB/s\"", "x").memory_bandwidth_bytes_per_s,
                   4.8e12);
  EXPECT_DOUBLE_EQ(parse_gpu_spec("memory=\"1GiB\"\nmemory_bandwidth = \"936GB\"", "x").memory_bandwidth_bytes_per_s,
                   936e9);
}

TEST(GpuSpecFile, BaseOverridesCatalogueCard) {
  const GpuSpec& base = find_gpu("rtx-4090");
  const GpuSpec g = parse_gpu_spec(R"(
base = "rtx-4090"
id = "rtx-4090-48gb"
memory = "48GiB"
pcie_generation = 3
)",
                                   "mod.toml");
  EXPECT_EQ(g.id, "rtx-4090-48gb");
  EXPECT_EQ(g.memory_bytes, 48 * kGiB);
  EXPECT_EQ(g.name, base.name + " (modified)");
  EXPECT_DOUBLE_EQ(g.bf16_flops, base.bf16_flops);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_bytes_per_s, base.memory_bandwidth_bytes_per_s);
  EXPECT_EQ(g.compute_capability_major, 8);
  EXPECT_EQ(g.pcie_generation, 3);
  EXPECT_DOUBLE_EQ(g.host_link_bytes_per_s, 16e9);  // follows the changed PCIe generation
  EXPECT_NE(g.source.find(base.source), std::string::npos);
  EXPECT_NE(g.source.find("mod.toml"), std::string::npos);

  // Base alone (memory optional), forgiving base names, and zeroing a rate.
  const GpuSpec h = parse_gpu_spec("base = \"H100\"\nfp8_tflops = 0", "b.toml");
  EXPECT_EQ(h.memory_bytes, find_gpu("h100-sxm").memory_bytes);
  EXPECT_EQ(h.fp8_flops, 0);
  EXPECT_EQ(h.gpu_link, "nvlink4");

  // A bridgeless H100 PCIe server: peers fall back to the PCIe rate.
  const GpuSpec p = parse_gpu_spec("base = \"h100-pcie\"\ngpu_link = \"pcie\"", "p.toml");
  EXPECT_DOUBLE_EQ(p.gpu_link_bytes_per_s, 64e9);
}

struct BadCase {
  const char* toml;
  const char* must_mention;
};

class GpuSpecBad : public ::testing::TestWithParam<BadCase> {};

// Every error starts with the file and, where the field is in the file, its line:
// "test.toml:2: bf16_tflops: must not be negative".
TEST_P(GpuSpecBad, RejectsNamingTheField) {
  const std::string msg = error_of(GetParam().toml);
  EXPECT_NE(msg.find(GetParam().must_mention), std::string::npos) << "input: " << GetParam().toml << "\nerror: " << msg;
  EXPECT_EQ(msg.rfind("test.toml:", 0), 0u) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    GpuSpecFile, GpuSpecBad,
    ::testing::Values(
        BadCase{"memory = \"16GiB\"\nname = ", "test.toml:2: invalid TOML"},              // bad TOML, with the line
        BadCase{"memory = \"16GiB\"\n[[[", "test.toml:2: invalid TOML"},
        BadCase{"memory = \"16GiB\"\nmemory = \"8GiB\"", "test.toml:2: invalid TOML"},   // duplicate key
        BadCase{"name = \"x\"", "test.toml: memory:"},                            // memory required without base
        BadCase{"", "test.toml: memory:"},
        BadCase{"memory = \"lots\"", "test.toml:1: memory:"},
        BadCase{"memory = \"-16GiB\"", "test.toml:1: memory:"},
        BadCase{"memory = \"0GiB\"", "test.toml:1: memory:"},
        BadCase{"memory = 0", "test.toml:1: memory:"},
        BadCase{"memory = -5", "test.toml:1: memory:"},
        BadCase{"memory = 16.5", "test.toml:1: memory:"},
        BadCase{"memory = true", "test.toml:1: memory:"},
        BadCase{"memory = \"17TiB\"", "test.toml:1: memory: must be between 1.0 GiB and 16.0 TiB (got \"17TiB\")"},
        // Under 1 GiB is a unit left out, as `--vram 24` is: the same range as the vram setting.
        BadCase{"memory = 24", "test.toml:1: memory: must be between 1.0 GiB and 16.0 TiB (got 24 bytes)"},
        BadCase{"memory = \"512MiB\"", "test.toml:1: memory: must be between 1.0 GiB and 16.0 TiB (got \"512MiB\")"},
        BadCase{"memory_bytes = 1073741823", "test.toml:1: memory_bytes: must be between 1.0 GiB"},
        BadCase{"memory_bytes = 99999999999999999", "test.toml:1: memory_bytes:"},
        BadCase{"memory_bytes = \"16GiB\"", "test.toml:1: memory_bytes:"},
        BadCase{"memory = \"16GiB\"\nmemory_bytes = 5", "not both"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth = \"200TB/s\"", "test.toml:2: memory_bandwidth:"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth = 900", "test.toml:2: memory_bandwidth:"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth = \"fast\"", "test.toml:2: memory_bandwidth:"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth_bytes_per_s = 0", "test.toml:2: memory_bandwidth_bytes_per_s:"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth_bytes_per_s = -1.0",
                "test.toml:2: memory_bandwidth_bytes_per_s:"},
        BadCase{"memory = \"16GiB\"\nmemory_bandwidth_bytes_per_s = nan", "test.toml:2: memory_bandwidth_bytes_per_s:"},
        BadCase{"memory = \"16GiB\"\nbf16_tflops = -1", "test.toml:2: bf16_tflops: must not be negative (got -1)"},
        BadCase{"memory = \"16GiB\"\npcie_lanes = -1", "test.toml:2: pcie_lanes: must be 1, 2, 4, 8, 16 or 32 (got -1)"},
        BadCase{"memory = \"16GiB\"\npcie_generation = 9223372036854775807",
                "test.toml:2: pcie_generation: must be between 1 and 6 (got 9223372036854775807)"},
        BadCase{"memory = \"16GiB\"\nbf16_tflops = 1e6", "test.toml:2: bf16_tflops:"},
        BadCase{"memory = \"16GiB\"\nbf16_tflops = inf", "test.toml:2: bf16_tflops:"},
        BadCase{"memory = \"16GiB\"\nfp16_tflops = \"fast\"", "test.toml:2: fp16_tflops:"},
        BadCase{"memory = \"16GiB\"\nfp32_tflops = -0.5", "test.toml:2: fp32_tflops:"},
        BadCase{"memory = \"16GiB\"\ntf32_tflops = 200000", "test.toml:2: tf32_tflops:"},
        BadCase{"memory = \"16GiB\"\nfp8_tflops = [1]", "test.toml:2: fp8_tflops:"},
        BadCase{"memory = \"16GiB\"\nint8_tops = -3", "test.toml:2: int8_tops:"},
        BadCase{"memory = \"16GiB\"\ncompute_capability = \"nine\"", "test.toml:2: compute_capability:"},
        BadCase{"memory = \"16GiB\"\ncompute_capability = \"8.9.1\"", "test.toml:2: compute_capability:"},
        BadCase{"memory = \"16GiB\"\ncompute_capability = \"-8.9\"", "test.toml:2: compute_capability:"},
        BadCase{"memory = \"16GiB\"\ncompute_capability = true", "test.toml:2: compute_capability:"},
        BadCase{"memory = \"16GiB\"\nclass = \"gaming\"", "test.toml:2: class:"},
        BadCase{"memory = \"16GiB\"\nclass = 3", "test.toml:2: class:"},
        BadCase{"memory = \"16GiB\"\npcie_generation = 9", "test.toml:2: pcie_generation:"},
        BadCase{"memory = \"16GiB\"\npcie_generation = 4.0", "test.toml:2: pcie_generation:"},
        BadCase{"memory = \"16GiB\"\npcie_lanes = 12", "test.toml:2: pcie_lanes:"},
        BadCase{"memory = \"16GiB\"\nhost_link_gb_per_s = 0", "test.toml:2: host_link_gb_per_s:"},
        BadCase{"memory = \"16GiB\"\nhost_link_gb_per_s = 1e9", "test.toml:2: host_link_gb_per_s:"},
        BadCase{"memory = \"16GiB\"\ngpu_link_gb_per_s = -1", "test.toml:2: gpu_link_gb_per_s:"},
        BadCase{"memory = \"16GiB\"\ngpu_link = 5", "test.toml:2: gpu_link:"},
        BadCase{"memory = \"16GiB\"\nid = \"\"", "test.toml:2: id:"},
        BadCase{"memory = \"16GiB\"\nname = 7", "test.toml:2: name:"},
        BadCase{"memory = \"16GiB\"\nmemmory = \"8GiB\"", "test.toml:2: memmory:"},     // typo: unknown field
        BadCase{"memory = \"16GiB\"\n[gpu]\nname = \"x\"", "test.toml:2: gpu:"},
        BadCase{"base = \"rtx-9090\"", "test.toml:1: base:"},
        BadCase{"base = 4090", "test.toml:1: base:"},
        // Aliases are the catalogue's: a --gpu-spec card is never looked up by name.
        BadCase{"memory = \"16GiB\"\naliases = [\"mine\"]",
                "test.toml:2: aliases: only the built-in catalogue's cards"}));

TEST(GpuSpecFile, BaseErrorListsCatalogue) {
  const std::string msg = error_of("base = \"rtx-9090\"");
  EXPECT_NE(msg.find("unknown GPU 'rtx-9090'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rtx-4090"), std::string::npos) << msg;
}

TEST(GpuSpecFile, LoadsTheShippedExample) {
  const GpuSpec g = load_gpu_spec_file(TRAINFIT_SOURCE_DIR "/docs/examples/example-gpu.toml");
  EXPECT_GT(g.memory_bytes, 0);
  EXPECT_GT(g.bf16_flops, 0);
  EXPECT_GT(g.memory_bandwidth_bytes_per_s, 0);
  EXPECT_FALSE(g.id.empty());
}

TEST(GpuSpecFile, MissingFileIsAnInputError) {
  try {
    load_gpu_spec_file("/nonexistent/dir/gpu.toml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/gpu.toml"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_gpu_spec_file(TRAINFIT_SOURCE_DIR "/data"), InputError);  // a directory
}

TEST(GpuSpecFile, LargerThanOneMebibyteIsRefused) {
  const std::string path = ::testing::TempDir() + "/huge-gpu.toml";
  std::ofstream(path) << "memory = \"16GiB\"\n" << std::string(std::size_t{1} << 20, '#') << "\n";
  try {
    load_gpu_spec_file(path);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "GPU spec file '" + path + "' is larger than 1.0 MiB");
  }
}

// A catalogue card (data/gpus/<id>.toml) is read by the same reader, with two differences: it is
// complete on its own (no base, every identifying field given) and it may give aliases.
constexpr const char* kCard = R"(id = "x1"
name = "Example X1"
architecture = "ada"
class = "workstation"
compute_capability = "8.9"
memory = "20GiB"
memory_bandwidth = "360GB/s"
source = "test"
)";

std::string card_error(const std::string& text) {
  try {
    (void)detail::read_gpu_card(text, "data/gpus/x1.toml", detail::GpuSpecKind::catalogue);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(GpuCatalogueCard, CompleteCardWithAliases) {
  const auto card = detail::read_gpu_card(std::string(kCard) + "aliases = [\"X 1\", \"ex1\"]\n", "data/gpus/x1.toml",
                                          detail::GpuSpecKind::catalogue);
  EXPECT_EQ(card.spec.id, "x1");
  EXPECT_EQ(card.spec.memory_bytes, 20 * kGiB);
  EXPECT_EQ(card.aliases, (std::vector<std::string>{"X 1", "ex1"}));
  EXPECT_EQ(card_error(kCard), "(accepted)");
}

TEST(GpuCatalogueCard, RejectsWhatOnlyAUserFileMaySay) {
  EXPECT_EQ(card_error(std::string("base = \"h200\"\n") + kCard)
                .rfind("data/gpus/x1.toml:1: base: a catalogue card is complete", 0),
            0u);
  EXPECT_EQ(card_error(std::string(kCard) + "aliases = [\"\"]\n"),
            "data/gpus/x1.toml:9: aliases: an alias must not be empty");
  EXPECT_EQ(card_error(std::string(kCard) + "aliases = [7]\n"),
            "data/gpus/x1.toml:9: aliases: expected a string, got an integer");
  // Each identifying field is required: left out, it would take a user file's "unknown" default.
  for (const char* field :
       {"id", "name", "architecture", "class", "compute_capability", "source", "memory_bandwidth"}) {
    std::string text;
    std::istringstream lines(kCard);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with(std::string(field) + " ")) text += line + "\n";
    }
    EXPECT_EQ(card_error(text).rfind(std::string("data/gpus/x1.toml: ") + field + ": missing", 0), 0u)
        << field << ": " << card_error(text);
  }
}

std::string catalogue_error(const std::vector<std::pair<std::string_view, std::string_view>>& files) {
  try {
    (void)detail::build_gpu_catalogue(files);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "(accepted)";
}

// The shipped files are checked by tests/golden/gpu_catalogue_test.cpp; these are the mistakes a
// new card file could make, each refused as a defect of the build, naming the file.
TEST(GpuCatalogueBuild, RefusesBrokenCardFiles) {
  const std::string x1 = kCard;
  const std::string x2 = "id = \"x2\"\nname = \"Example X2\"\n" + x1.substr(x1.find("architecture"));
  EXPECT_EQ(catalogue_error({{"x1", x1}, {"x2", x2}}), "(accepted)");
  EXPECT_EQ(catalogue_error({{"x1", x1 + "memory = \n"}})
                .rfind("built-in GPU catalogue: data/gpus/x1.toml:9: invalid TOML", 0),
            0u);
  EXPECT_EQ(catalogue_error({{"y1", x1}}), "built-in GPU catalogue: data/gpus/y1.toml: id 'x1' is not the file's name");
  EXPECT_EQ(catalogue_error({{"x1", x1 + "aliases = [\"- _\"]\n"}}),
            "built-in GPU catalogue: data/gpus/x1.toml: alias '- _' is empty once separators are dropped");
  EXPECT_EQ(catalogue_error({{"x1", x1 + "aliases = [\"xx\"]\n"}, {"x2", x2 + "aliases = [\"XX\"]\n"}}),
            "built-in GPU catalogue: alias 'xx' names both x1 and x2");
  EXPECT_EQ(catalogue_error({{"x1", x1 + "aliases = [\"Example X2\"]\n"}, {"x2", x2}}),
            "built-in GPU catalogue: alias 'examplex2' of x1 is x2's own id or name");
  const auto built = detail::build_gpu_catalogue({{"x1", x1 + "aliases = [\"Example-One\"]\n"}, {"x2", x2}});
  ASSERT_EQ(built.cards.size(), 2u);
  EXPECT_EQ(built.cards[1].id, "x2");  // the files' order
  ASSERT_EQ(built.aliases.size(), 1u);
  EXPECT_EQ(built.aliases[0].first, "exampleone");
  EXPECT_EQ(built.aliases[0].second, 0u);
}

TEST(GpuWithVram, MemoryOnlyCard) {
  const GpuSpec g = gpu_with_vram(16 * kGiB);
  EXPECT_EQ(g.id, "custom");
  EXPECT_EQ(g.name, "custom 16.0 GiB card");
  EXPECT_EQ(g.memory_bytes, 16 * kGiB);
  EXPECT_EQ(g.bf16_flops, 0);
  EXPECT_EQ(g.memory_bandwidth_bytes_per_s, 0);
  EXPECT_FALSE(g.source.empty());
  EXPECT_THROW(gpu_with_vram(0), InputError);
  EXPECT_THROW(gpu_with_vram(-1), InputError);
  EXPECT_THROW(gpu_with_vram(17 * 1024 * kGiB), InputError);
  // 24 bytes is no card: the range of the `vram` setting, as a SettingError on it.
  try {
    (void)gpu_with_vram(24);
    ADD_FAILURE() << "a 24-byte card was accepted";
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "vram");
    EXPECT_EQ(e.reason(), "must be between 1.0 GiB and 16.0 TiB (got 24 bytes); is the unit right?");
  }
  EXPECT_EQ(gpu_with_vram(kMinCardMemoryBytes).memory_bytes, kGiB);
  // One range: the settings table's vram row takes it from hardware.hpp.
  const Setting* vram = find_setting("vram");
  ASSERT_NE(vram, nullptr);
  EXPECT_EQ(vram->minimum, static_cast<double>(kMinCardMemoryBytes));
  EXPECT_EQ(vram->maximum, static_cast<double>(kMaxCardMemoryBytes));
}

}  // namespace
}  // namespace trainfit
