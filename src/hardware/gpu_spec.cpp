// GPU spec files (TOML) and cards known only by their memory size.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

// Sanity limits: far above any real card, low enough to catch unit mistakes
// (a bandwidth typed in bytes where GB/s was meant, memory in bits...).
constexpr std::int64_t kMaxMemory = 16 * 1024 * kGiB;  // 16 TiB
constexpr double kMaxBandwidth = 100e12;                // 100 TB/s
constexpr double kMaxTflops = 100000;
constexpr double kMaxLinkGBs = 100000;
constexpr std::size_t kMaxFileBytes = 1 << 20;

constexpr std::string_view kFields =
    "id, name, vendor, architecture, compute_capability, class, memory, memory_bytes, memory_bandwidth, "
    "memory_bandwidth_bytes_per_s, fp32_tflops, tf32_tflops, bf16_tflops, fp16_tflops, fp8_tflops, int8_tops, "
    "pcie_generation, pcie_lanes, host_link_gb_per_s, gpu_link, gpu_link_gb_per_s, source, base";

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
  }
}

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

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(std::string_view key, std::string_view why) const {
    throw InputError(fmt::format("GPU spec '{}': field '{}': {}", source_, key, why));
  }

  std::string text(std::string_view key, const toml::node& n) const {
    const auto* s = n.as_string();
    if (s == nullptr) fail(key, fmt::format("expected a string, got {}", type_name(n)));
    return s->get();
  }

  std::int64_t integer(std::string_view key, const toml::node& n) const {
    const auto* i = n.as_integer();
    if (i == nullptr) fail(key, fmt::format("expected an integer, got {}", type_name(n)));
    return i->get();
  }

  double number(std::string_view key, const toml::node& n) const {
    double v = 0;
    if (const auto* i = n.as_integer()) {
      v = static_cast<double>(i->get());
    } else if (const auto* f = n.as_floating_point()) {
      v = f->get();
    } else {
      fail(key, fmt::format("expected a number, got {}", type_name(n)));
    }
    if (!std::isfinite(v)) fail(key, "must be a finite number");
    return v;
  }

  // A number in [0, max]: 0 means "not supported / unknown" for throughput and links.
  double bounded(std::string_view key, const toml::node& n, double max, bool zero_ok) const {
    const double v = number(key, n);
    if (v < 0 || (!zero_ok && v == 0)) fail(key, zero_ok ? "must not be negative" : "must be positive");
    if (v > max) fail(key, fmt::format("{} is implausibly large (limit {})", v, max));
    return v;
  }

  std::int64_t bytes(std::string_view key, std::string_view value) const {
    try {
      return parse_bytes(value);
    } catch (const InputError& e) {
      fail(key, e.what());
    }
  }

 private:
  std::string_view source_;
};

toml::table parse_toml(std::string_view text, std::string_view source) {
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("GPU spec '{}' line {}: invalid TOML: {}", source, e.source().begin.line,
                                 e.description()));
  }
#else
  toml::parse_result result = toml::parse(text, source);
  if (!result) {
    throw InputError(fmt::format("GPU spec '{}' line {}: invalid TOML: {}", source,
                                 result.error().source().begin.line, result.error().description()));
  }
  return std::move(result).table();
#endif
}

}  // namespace

GpuSpec parse_gpu_spec(std::string_view toml_text, std::string_view source_name) {
  const toml::table table = parse_toml(toml_text, source_name);
  const Reader r(source_name);

  GpuSpec spec;
  const bool has_base = table.contains("base");
  if (has_base) {
    const std::string base = r.text("base", *table.get("base"));
    try {
      spec = find_gpu(base);
    } catch (const InputError& e) {
      r.fail("base", e.what());
    }
    spec.source = fmt::format("{}; overridden by {}", spec.source, source_name);
    spec.id = "custom";
  } else {
    spec.id = "custom";
    spec.architecture = "unknown";
    spec.source = std::string(source_name);
  }

  bool memory_set = false;
  bool host_link_set = false;
  bool gpu_link_rate_set = false;
  bool pcie_changed = false;
  bool name_set = false;
  for (const auto& [key_node, node] : table) {
    const std::string_view key = key_node.str();
    if (key == "base") continue;
    if (key == "id" || key == "name" || key == "vendor" || key == "architecture" || key == "source" ||
        key == "gpu_link") {
      std::string v = r.text(key, node);
      if (v.empty() && key != "source") r.fail(key, "must not be empty");
      if (key == "id") spec.id = std::move(v);
      if (key == "name") { spec.name = std::move(v); name_set = true; }
      if (key == "vendor") spec.vendor = std::move(v);
      if (key == "architecture") spec.architecture = std::move(v);
      if (key == "source") spec.source = std::move(v);
      if (key == "gpu_link") spec.gpu_link = std::move(v);
    } else if (key == "compute_capability") {
      // "8.9" as a string (a TOML float 8.9 is accepted too, and 12 as an integer).
      std::string v;
      if (node.is_string()) v = r.text(key, node);
      else if (node.is_integer()) v = fmt::format("{}.0", r.integer(key, node));
      else if (node.is_floating_point()) v = fmt::format("{:.1f}", r.number(key, node));
      else r.fail(key, "expected a string such as \"8.9\"");
      const auto cc = compute_capability(v);
      if (!cc) r.fail(key, fmt::format("'{}' is not of the form major.minor, e.g. \"8.9\"", v));
      spec.compute_capability_major = cc->first;
      spec.compute_capability_minor = cc->second;
    } else if (key == "class") {
      const std::string v = r.text(key, node);
      if (v == "consumer") spec.gpu_class = GpuClass::consumer;
      else if (v == "workstation") spec.gpu_class = GpuClass::workstation;
      else if (v == "datacenter") spec.gpu_class = GpuClass::datacenter;
      else r.fail(key, fmt::format("'{}' is not one of consumer, workstation, datacenter", v));
    } else if (key == "memory" || key == "memory_bytes") {
      if (memory_set) r.fail(key, "give memory or memory_bytes, not both");
      const std::int64_t m = node.is_string() && key == "memory" ? r.bytes(key, r.text(key, node)) : r.integer(key, node);
      if (m <= 0) r.fail(key, "must be positive");
      if (m > kMaxMemory) r.fail(key, "is above 16 TiB; is the unit right?");
      spec.memory_bytes = m;
      memory_set = true;
    } else if (key == "memory_bandwidth") {
      // "1008GB/s", "4.8 TB/s": the /s is optional, units as for memory (GB = 10^9).
      std::string v = r.text(key, node);
      if (v.size() >= 2 && (v.ends_with("/s") || v.ends_with("/S"))) v.resize(v.size() - 2);
      const auto bw = static_cast<double>(r.bytes(key, v));
      if (bw > kMaxBandwidth) r.fail(key, "is above 100 TB/s; is the unit right?");
      spec.memory_bandwidth_bytes_per_s = bw;
    } else if (key == "memory_bandwidth_bytes_per_s") {
      spec.memory_bandwidth_bytes_per_s = r.bounded(key, node, kMaxBandwidth, false);
    } else if (key == "fp32_tflops") {
      spec.fp32_flops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "tf32_tflops") {
      spec.tf32_flops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "bf16_tflops") {
      spec.bf16_flops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "fp16_tflops") {
      spec.fp16_flops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "fp8_tflops") {
      spec.fp8_flops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "int8_tops") {
      spec.int8_ops = r.bounded(key, node, kMaxTflops, true) * 1e12;
    } else if (key == "pcie_generation") {
      const std::int64_t g = r.integer(key, node);
      if (g < 1 || g > 6) r.fail(key, "must be 1 to 6");
      spec.pcie_generation = static_cast<int>(g);
      pcie_changed = true;
    } else if (key == "pcie_lanes") {
      const std::int64_t l = r.integer(key, node);
      if (l != 1 && l != 2 && l != 4 && l != 8 && l != 16 && l != 32) r.fail(key, "must be 1, 2, 4, 8, 16 or 32");
      spec.pcie_lanes = static_cast<int>(l);
      pcie_changed = true;
    } else if (key == "host_link_gb_per_s") {
      spec.host_link_bytes_per_s = r.bounded(key, node, kMaxLinkGBs, false) * 1e9;
      host_link_set = true;
    } else if (key == "gpu_link_gb_per_s") {
      spec.gpu_link_bytes_per_s = r.bounded(key, node, kMaxLinkGBs, true) * 1e9;
      gpu_link_rate_set = true;
    } else {
      r.fail(key, fmt::format("unknown field (known: {})", kFields));
    }
  }

  if (!has_base && !memory_set) r.fail("memory", "missing (give memory = \"24GiB\", or base = \"<catalogue id>\")");
  // A changed PCIe link changes the host link unless that was given explicitly.
  if (pcie_changed && !host_link_set) {
    const double derived = pcie_bytes_per_s(spec.pcie_generation, spec.pcie_lanes);
    if (derived > 0) spec.host_link_bytes_per_s = derived;
  }
  if (spec.gpu_link.empty()) spec.gpu_link = spec.host_link_bytes_per_s > 0 ? "pcie" : "none";
  if (spec.gpu_link == "pcie" && !gpu_link_rate_set) spec.gpu_link_bytes_per_s = spec.host_link_bytes_per_s;
  if (!name_set) {
    spec.name = has_base ? spec.name + " (modified)" : fmt::format("custom {} card", format_bytes(spec.memory_bytes));
  }
  return spec;
}

GpuSpec load_gpu_spec_file(std::string_view path) {
  const std::string p(path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) {
    throw InputError(fmt::format("GPU spec file '{}' does not exist or is not a file", p));
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read GPU spec file '{}'", p));
  std::string text;
  text.resize(kMaxFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw InputError(fmt::format("cannot read GPU spec file '{}'", p));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) throw InputError(fmt::format("GPU spec file '{}' is larger than 1 MiB", p));
  return parse_gpu_spec(text, p);
}

GpuSpec gpu_with_vram(std::int64_t memory_bytes) {
  if (memory_bytes <= 0) throw InputError("--vram must be positive");
  if (memory_bytes > kMaxMemory) throw InputError("--vram is above 16 TiB; is the unit right?");
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
