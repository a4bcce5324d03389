#pragma once
// GPU specifications: capacity, bandwidth, matrix throughput and links.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit {

// The memory a card may have, however it is given (`--vram`, the `vram` setting, a GPU spec file's
// `memory`/`memory_bytes`, gpu_with_vram): at least 1 GiB, since every card that trains a model
// has more and a smaller figure is a unit left out (`--vram 24` is 24 bytes); at most 16 TiB, far
// above any card, so that a unit mistake (bits, KB for MB) is caught. The `vram` row of the
// settings table takes its range from here: one definition for every way of naming a card.
inline constexpr std::int64_t kMinCardMemoryBytes = std::int64_t{1} << 30;  // 1 GiB
inline constexpr std::int64_t kMaxCardMemoryBytes = std::int64_t{1} << 44;  // 16 TiB

enum class GpuClass { consumer, workstation, datacenter };

// One 400 Gb/s InfiniBand NDR (or RoCE) adapter per GPU, as DGX/HGX H100 and H200 systems have:
// 50 GB/s one direction. A cluster with less gives network_gb_per_s in a GPU spec file.
inline constexpr double kDefaultNetworkBytesPerSecond = 50e9;

struct GpuSpec {
  std::string id;            // catalogue name: "rtx-5070-ti", "h200"
  std::string name;          // marketing name: "NVIDIA GeForce RTX 5070 Ti"
  std::string vendor = "nvidia";
  std::string architecture;  // "blackwell", "hopper", ...
  int compute_capability_major = 0;  // 9 for Hopper (decides cuBLAS workspace size, kernel availability)
  int compute_capability_minor = 0;
  GpuClass gpu_class = GpuClass::datacenter;
  std::int64_t memory_bytes = 0;           // as the driver reports it (nvidia-smi total)
  double memory_bandwidth_bytes_per_s = 0; // datasheet peak
  // Dense (no sparsity) peak matrix throughput, FLOP/s; 0 when not supported.
  double fp32_flops = 0;   // CUDA-core FP32 (non-tensor)
  double tf32_flops = 0;
  double bf16_flops = 0;
  double fp16_flops = 0;
  double fp8_flops = 0;
  double int8_ops = 0;
  int pcie_generation = 0;
  int pcie_lanes = 0;
  double host_link_bytes_per_s = 0;  // one direction
  std::string gpu_link;              // "nvlink4", "pcie", "infinity-fabric", "none"
  double gpu_link_bytes_per_s = 0;   // one direction, per GPU
  // Between hosts, one direction, per GPU (its share of the host's network adapters). Catalogue
  // cards assume kDefaultNetworkBytesPerSecond; a spec file's network_gb_per_s gives a cluster's own.
  double network_bytes_per_s = kDefaultNetworkBytesPerSecond;
  std::string source;                // where the figures come from
};

// The built-in catalogue: data/gpus/<id>.toml compiled in, in data/gpus/order.txt's order.
const std::vector<GpuSpec>& gpu_catalog();
// Exact id or a forgiving match ("5070ti", "RTX 5070 Ti", "h100" -> "h100-sxm").
// Throws InputError listing close names when nothing matches.
const GpuSpec& find_gpu(std::string_view name);
// A GPU spec file (TOML, same field names as GpuSpec; memory as "24GiB").
GpuSpec parse_gpu_spec(std::string_view toml_text, std::string_view source_name);
GpuSpec load_gpu_spec_file(std::string_view path);
// A card known only by its memory: throughput fields stay 0 (time can't be predicted). A memory
// outside [kMinCardMemoryBytes, kMaxCardMemoryBytes] is a SettingError on `vram`.
GpuSpec gpu_with_vram(std::int64_t memory_bytes);

std::string to_string(GpuClass c);

// One direction of a PCIe link as datasheets quote it: 0.25 GB/s per lane for Gen1,
// doubling each generation (x16 Gen4 = 32 GB/s, "64 GB/s bidirectional"); 0 outside Gen1-6.
double pcie_bytes_per_s(int generation, int lanes);

}  // namespace trainfit
