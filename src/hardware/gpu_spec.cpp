// GPU spec files (TOML), the built-in catalogue's card files, and cards known only by their memory.
#include <charconv>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "hardware/gpu_card.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

// Sanity limits: far above any real card, low enough to catch unit mistakes
// (a bandwidth typed in bytes where GB/s was meant, memory in bits...).
constexpr double kMaxBandwidth = 100e12;                // 100 TB/s
constexpr double kMaxTflops = 100000;
constexpr double kMaxLinkGBs = 100000;
// A spec file is a few hundred bytes; past this the path names something else.
constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;

constexpr std::string_view kFields =
    "id, name, vendor, architecture, compute_capability, class, memory, memory_bytes, memory_bandwidth, "
    "memory_bandwidth_bytes_per_s, fp32_tflops, tf32_tflops, bf16_tflops, fp16_tflops, fp8_tflops, int8_tops, "
    "pcie_generation, pcie_lanes, host_link_gb_per_s, gpu_link, gpu_link_gb_per_s, network_gb_per_s, source, base";

// What a catalogue card must say for itself: left out, each would silently take a user file's
// "unknown" default ("custom", a datacenter card of compute capability 0.0...).
constexpr std::string_view kCatalogueRequired[] = {"id", "name", "architecture", "class", "compute_capability",
                                                   "source"};

// "8.9" -> {8, 9}; nullopt unless exactly 1-2 digits, a dot, 1-2 digits.
std::optional<std::pair<int, int>> compute_capability(std::string_view v) {
  const auto dot = v.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  auto part = [](std::string_view d) -> std::optional<int> {
    int x = 0;
    if (d.empty() || d.size() > 2 || d.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), x);
    if (ec != std::errc{} || end != d.data() + d.size()) return std::nullopt;
    return x;
  };
  const auto major = part(v.substr(0, dot));
  const auto minor = part(v.substr(dot + 1));
  if (!major || !minor) return std::nullopt;
  return std::pair{*major, *minor};
}

// What is wrong with a card's memory outside [kMinCardMemoryBytes, kMaxCardMemoryBytes]: the limits
// are the `vram` setting's, in the same words, and the value as it was written ("got \"17TiB\"";
// a byte count as bytes).
std::string card_memory_error(const std::string& written) {
  return fmt::format("must be between {} and {} (got {}); is the unit right?", format_bytes(kMinCardMemoryBytes),
                     format_bytes(kMaxCardMemoryBytes), written);
}

// A number in [0, max]: 0 means "not supported / unknown" for throughput and links. The words
// say which way the value is wrong, and that a too-large one is likely a unit mistake.
double bounded(const detail::TomlReader& r, std::string_view key, const toml::node& n, double max, bool zero_ok) {
  const double v = r.number(n, key);
  if (v < 0 || (!zero_ok && v == 0))
    r.fail(&n, key, fmt::format("{} (got {})", zero_ok ? "must not be negative" : "must be positive", v));
  if (v > max) r.fail(&n, key, fmt::format("{} is implausibly large (limit {})", v, max));
  return v;
}

}  // namespace

namespace detail {

GpuCard read_gpu_card(std::string_view toml_text, std::string_view source_name, GpuSpecKind kind) {
  const toml::table table = parse_toml(toml_text, source_name);
  const TomlReader r(source_name);
  const bool catalogue = kind == GpuSpecKind::catalogue;

  GpuCard card;
  GpuSpec& spec = card.spec;
  const toml::node* base_node = table.get("base");
  if (base_node != nullptr) {
    // Checked before the lookup: a catalogue card naming a base would read the catalogue while
    // the catalogue is being built.
    if (catalogue) {
      r.fail(base_node, "base", "a catalogue card is complete in its own file; give its fields, not a base");
    }
    const std::string base = r.text(*base_node, "base");
    try {
      spec = find_gpu(base);
    } catch (const InputError& e) {
      r.fail(base_node, "base", e.what());
    }
    spec.source = fmt::format("{}; overridden by {}", spec.source, source_name);
    spec.id = "custom";
  } else {
    spec.id = "custom";
    spec.architecture = "unknown";
    spec.source = std::string(source_name);
  }

  bool memory_set = false;
  bool bandwidth_set = false;
  bool host_link_set = false;
  bool gpu_link_rate_set = false;
  bool pcie_changed = false;
  bool name_set = false;
  for (const auto& [key_node, node] : table) {
    const std::string_view key = key_node.str();
    if (key == "base") continue;
    if (key == "id" || key == "name" || key == "vendor" || key == "architecture" || key == "source" ||
        key == "gpu_link") {
      std::string v = r.text(node, key);
      if (v.empty() && key != "source") r.fail(&node, key, "must not be empty");
      if (key == "id") spec.id = std::move(v);
      if (key == "name") { spec.name = std::move(v); name_set = true; }
      if (key == "vendor") spec.vendor = std::move(v);
      if (key == "architecture") spec.architecture = std::move(v);
      if (key == "source") spec.source = std::move(v);
      if (key == "gpu_link") spec.gpu_link = std::move(v);
    } else if (key == "aliases") {
      // A --gpu-spec card is used as given, never looked up by name, so an alias there would
      // promise a lookup that never happens.
      if (!catalogue) {
        r.fail(&node, key,
               "only the built-in catalogue's cards (data/gpus/) have aliases; a --gpu-spec card is used as given");
      }
      card.aliases = r.strings(node, key);
      for (const std::string& alias : card.aliases) {
        if (alias.empty()) r.fail(&node, key, "an alias must not be empty");
      }
    } else if (key == "compute_capability") {
      // "8.9" as a string (a TOML float 8.9 is accepted too, and 12 as an integer).
      std::string v;
      if (node.is_string()) v = r.text(node, key);
      else if (node.is_integer()) v = fmt::format("{}.0", r.integer(node, key));
      else if (node.is_floating_point()) v = fmt::format("{:.1f}", r.number(node, key));
      else r.fail(&node, key, "expected a string such as \"8.9\"");
      const auto cc = compute_capability(v);
      if (!cc) r.fail(&node, key, fmt::format("'{}' is not of the form major.minor, e.g. \"8.9\"", v));
      spec.compute_capability_major = cc->first;
      spec.compute_capability_minor = cc->second;
    } else if (key == "class") {
      const std::string v = r.text(node, key);
      if (v == "consumer") spec.gpu_class = GpuClass::consumer;
      else if (v == "workstation") spec.gpu_class = GpuClass::workstation;
      else if (v == "datacenter") spec.gpu_class = GpuClass::datacenter;
      else r.fail(&node, key, fmt::format("'{}' is not one of consumer, workstation, datacenter", v));
    } else if (key == "memory" || key == "memory_bytes") {
      if (memory_set) r.fail(&node, key, "give memory or memory_bytes, not both");
      // `memory` takes a size ("24GiB") or a byte count; `memory_bytes` only a byte count.
      const std::int64_t m = key == "memory" ? r.bytes(node, key) : r.integer(node, key);
      if (m < kMinCardMemoryBytes || m > kMaxCardMemoryBytes)
        r.fail(&node, key,
               card_memory_error(node.is_string() ? fmt::format("\"{}\"", r.text(node, key)) : fmt::format("{} bytes", m)));
      spec.memory_bytes = m;
      memory_set = true;
    } else if (key == "memory_bandwidth") {
      // "1008GB/s", "4.8 TB/s": the /s is optional, units as for memory (GB = 10^9).
      std::string v = r.text(node, key);
      if (v.size() >= 2 && (v.ends_with("/s") || v.ends_with("/S"))) v.resize(v.size() - 2);
      double bw = 0;
      try {
        bw = static_cast<double>(parse_bytes(v));
      } catch (const InputError& e) {
        r.fail(&node, key, e.what());
      }
      if (bw > kMaxBandwidth) r.fail(&node, key, "is above 100 TB/s; is the unit right?");
      spec.memory_bandwidth_bytes_per_s = bw;
      bandwidth_set = true;
    } else if (key == "memory_bandwidth_bytes_per_s") {
      spec.memory_bandwidth_bytes_per_s = bounded(r, key, node, kMaxBandwidth, false);
      bandwidth_set = true;
    } else if (key == "fp32_tflops") {
      spec.fp32_flops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "tf32_tflops") {
      spec.tf32_flops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "bf16_tflops") {
      spec.bf16_flops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "fp16_tflops") {
      spec.fp16_flops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "fp8_tflops") {
      spec.fp8_flops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "int8_tops") {
      spec.int8_ops = bounded(r, key, node, kMaxTflops, true) * 1e12;
    } else if (key == "pcie_generation") {
      spec.pcie_generation = static_cast<int>(r.integer(node, key, 1, 6));
      pcie_changed = true;
    } else if (key == "pcie_lanes") {
      const std::int64_t l = r.integer(node, key);
      if (l != 1 && l != 2 && l != 4 && l != 8 && l != 16 && l != 32) {
        r.fail(&node, key, fmt::format("must be 1, 2, 4, 8, 16 or 32 (got {})", l));
      }
      spec.pcie_lanes = static_cast<int>(l);
      pcie_changed = true;
    } else if (key == "host_link_gb_per_s") {
      spec.host_link_bytes_per_s = bounded(r, key, node, kMaxLinkGBs, false) * 1e9;
      host_link_set = true;
    } else if (key == "gpu_link_gb_per_s") {
      spec.gpu_link_bytes_per_s = bounded(r, key, node, kMaxLinkGBs, true) * 1e9;
      gpu_link_rate_set = true;
    } else if (key == "network_gb_per_s") {
      spec.network_bytes_per_s = bounded(r, key, node, kMaxLinkGBs, false) * 1e9;
    } else {
      r.fail(&node, key, fmt::format("unknown field (known: {}{})", kFields, catalogue ? ", aliases" : ""));
    }
  }

  if (catalogue) {
    for (std::string_view field : kCatalogueRequired) {
      if (!table.contains(field)) r.fail(nullptr, field, "missing: a catalogue card gives it (data/gpus/README.md)");
    }
    if (!bandwidth_set) r.fail(nullptr, "memory_bandwidth", "missing: a catalogue card gives it (data/gpus/README.md)");
  }
  if (base_node == nullptr && !memory_set) {
    r.fail(nullptr, "memory", "missing (give memory = \"24GiB\", or base = \"<catalogue id>\")");
  }
  // A changed PCIe link changes the host link unless that was given explicitly.
  if (pcie_changed && !host_link_set) {
    const double derived = pcie_bytes_per_s(spec.pcie_generation, spec.pcie_lanes);
    if (derived > 0) spec.host_link_bytes_per_s = derived;
  }
  if (spec.gpu_link.empty()) spec.gpu_link = spec.host_link_bytes_per_s > 0 ? "pcie" : "none";
  if (spec.gpu_link == "pcie" && !gpu_link_rate_set) spec.gpu_link_bytes_per_s = spec.host_link_bytes_per_s;
  if (!name_set) {
    spec.name = base_node != nullptr ? spec.name + " (modified)"
                                     : fmt::format("custom {} card", format_bytes(spec.memory_bytes));
  }
  return card;
}

}  // namespace detail

GpuSpec parse_gpu_spec(std::string_view toml_text, std::string_view source_name) {
  return detail::read_gpu_card(toml_text, source_name, detail::GpuSpecKind::user_file).spec;
}

GpuSpec load_gpu_spec_file(std::string_view path) {
  return parse_gpu_spec(detail::read_text_file(path, "GPU spec file", kMaxFileBytes), path);
}

GpuSpec gpu_with_vram(std::int64_t memory_bytes) {
  if (memory_bytes < kMinCardMemoryBytes || memory_bytes > kMaxCardMemoryBytes)
    throw SettingError("vram", card_memory_error(fmt::format("{} bytes", memory_bytes)));
  GpuSpec spec;
  spec.id = "custom";
  spec.name = fmt::format("custom {} card", format_bytes(memory_bytes));
  spec.architecture = "unknown";
  spec.memory_bytes = memory_bytes;
  spec.gpu_link = "none";
  spec.source = "--vram (memory only: throughput unknown, so step time cannot be predicted)";
  return spec;
}

}  // namespace trainfit
