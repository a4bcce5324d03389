// The built-in GPU catalogue and name lookup. The cards are data/gpus/<id>.toml, compiled in
// (cmake/embed_data_files.cmake) and read by the same reader as a --gpu-spec file; the
// conventions every card follows (driver-reported memory, dense throughput, one-direction links)
// are in data/gpus/README.md, and each file's comments say where its figures come from.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/text.hpp"
#include "hardware/gpu_card.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"

namespace trainfit {

double pcie_bytes_per_s(int generation, int lanes) {
  if (generation < 1 || generation > 6 || lanes <= 0) return 0;
  return 0.25e9 * std::ldexp(1.0, generation - 1) * lanes;
}

std::string to_string(GpuClass c) {
  switch (c) {
    case GpuClass::consumer: return "consumer";
    case GpuClass::workstation: return "workstation";
    case GpuClass::datacenter: return "datacenter";
  }
  return "unknown";
}

namespace {

// Lower-case, drop separators, then drop leading brand words, so that "NVIDIA GeForce
// RTX 5070 Ti", "rtx-5070-ti" and "5070ti" compare equal. nvidia-smi names reduce the
// same way, which lets `bench` and `watch` map a detected card onto the catalogue.
std::string normalize(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_' || c == '\t') continue;
    s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  static constexpr std::string_view prefixes[] = {"nvidia", "geforce", "rtx", "tesla", "amd", "instinct"};
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (std::string_view p : prefixes) {
      if (s.size() > p.size() && s.starts_with(p)) {
        s.erase(0, p.size());
        stripped = true;
      }
    }
  }
  return s;
}

// The cards' text ships inside the binary, so a card that does not read is a defect of the build:
// a logic_error (the CLI's "internal error"), which tests/golden/gpu_catalogue_test.cpp turns
// into a failing test before it can ship.
[[noreturn]] void broken(const std::string& why) { throw std::logic_error("built-in GPU catalogue: " + why); }

const detail::GpuCatalogue& catalogue() {
  static const detail::GpuCatalogue c = detail::build_gpu_catalogue(detail::embedded_gpu_specs());
  return c;
}

using detail::edit_distance;

}  // namespace

namespace detail {

GpuCatalogue build_gpu_catalogue(const std::vector<std::pair<std::string_view, std::string_view>>& files) {
  GpuCatalogue c;
  for (const auto& [stem, text] : files) {
    const std::string source = fmt::format("data/gpus/{}.toml", stem);
    GpuCard card;
    try {
      card = read_gpu_card(text, source, GpuSpecKind::catalogue);
    } catch (const InputError& e) {
      broken(e.what());
    }
    if (card.spec.id != stem) broken(fmt::format("{}: id '{}' is not the file's name", source, card.spec.id));
    for (const std::string& alias : card.aliases) {
      const std::string key = normalize(alias);
      if (key.empty()) broken(fmt::format("{}: alias '{}' is empty once separators are dropped", source, alias));
      c.aliases.emplace_back(key, c.cards.size());
    }
    c.cards.push_back(std::move(card.spec));
  }
  // An alias another card answers to first (by its id or name), or one that names two cards,
  // would never pick the card that lists it.
  for (std::size_t i = 0; i < c.aliases.size(); ++i) {
    const auto& [key, owner] = c.aliases[i];
    for (std::size_t k = 0; k < c.cards.size(); ++k) {
      if (k != owner && (normalize(c.cards[k].id) == key || normalize(c.cards[k].name) == key)) {
        broken(fmt::format("alias '{}' of {} is {}'s own id or name", key, c.cards[owner].id, c.cards[k].id));
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (c.aliases[j].first == key) {
        broken(fmt::format("alias '{}' names both {} and {}", key, c.cards[c.aliases[j].second].id,
                           c.cards[owner].id));
      }
    }
  }
  return c;
}

}  // namespace detail

const std::vector<GpuSpec>& gpu_catalog() { return catalogue().cards; }

const GpuSpec& find_gpu(std::string_view name) {
  const detail::GpuCatalogue& c = catalogue();
  const auto& cards = c.cards;
  for (const GpuSpec& g : cards) {
    if (g.id == name) return g;
  }
  // Bounded so a pasted megabyte does not cost quadratic edit-distance work below.
  const std::string key = normalize(name.substr(0, 200));
  if (!key.empty()) {
    for (const GpuSpec& g : cards) {
      if (normalize(g.id) == key || normalize(g.name) == key) return g;
    }
    for (const auto& [alias, index] : c.aliases) {
      if (alias == key) return cards[index];
    }
  }
  // Unknown: list every id, the likeliest first (containment, then edit distance).
  std::vector<std::pair<std::size_t, std::string_view>> ranked;
  for (const GpuSpec& g : cards) {
    const std::string id = normalize(g.id);
    const bool contains = !key.empty() && (id.find(key) != std::string::npos || key.find(id) != std::string::npos);
    ranked.emplace_back(contains ? 0 : 1 + edit_distance(key, id), g.id);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string_view> known;
  for (const auto& [score, id] : ranked) known.push_back(id);
  throw InputError(fmt::format("unknown GPU {}; known: {} (or describe the card with --vram or --gpu-spec)",
                               detail::quoted(name), fmt::join(known, ", ")));
}

}  // namespace trainfit
