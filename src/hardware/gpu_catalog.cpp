// The compiled-in GPU catalogue and name lookup.
//
// Conventions for every entry (docs/gpus.md repeats them for users):
// - memory_bytes is what nvidia-smi (rocm-smi for AMD) reports as the total, taken
//   from real `nvidia-smi` output of that card, not the box size: the driver reserves
//   part of the memory, and a 16 GB RTX 5070 Ti reports 16,303 MiB, not 16,384.
// - Throughput is DENSE (no 2:4 sparsity). Datasheets that print only sparse figures
//   ("* with sparsity") are halved. GeForce cards run FP16/BF16/FP8 tensor math with
//   FP32 accumulate at half the FP16-accumulate rate; the FP32-accumulate figure is
//   used because that is what PyTorch autocast and bf16 training get.
// - Where a consumer card is not in its whitepaper's appendix, the tensor figures are
//   the whitepaper's per-SM rates times the product page's SM count and boost clock;
//   the source note says so.
// - Host and GPU links are bytes/s in ONE direction; datasheets quote bidirectional
//   totals, which are halved here.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

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

constexpr double T = 1e12;   // TFLOP/s -> FLOP/s
constexpr double GB = 1e9;   // GB/s -> bytes/s
constexpr std::int64_t mib(std::int64_t n) { return n * kMiB; }
const double kGen3x16 = pcie_bytes_per_s(3, 16);
const double kGen4x16 = pcie_bytes_per_s(4, 16);
const double kGen5x16 = pcie_bytes_per_s(5, 16);

std::vector<GpuSpec> build_catalog() {
  using enum GpuClass;
  return {
      // GeForce RTX 3060 12GB (GA106, 28 SMs, 1.777 GHz boost). Not in the GA102 whitepaper:
      // FP32, memory and bandwidth from NVIDIA's RTX 3060 product page; tensor = GA10x per-SM
      // rates (GA102 whitepaper) x 28 SMs x 1.777 GHz, FP32 accumulate.
      {.id = "rtx-3060-12gb", .name = "NVIDIA GeForce RTX 3060 12GB", .architecture = "ampere",
       .compute_capability_major = 8, .compute_capability_minor = 6, .gpu_class = consumer,
       .memory_bytes = mib(12288), .memory_bandwidth_bytes_per_s = 360 * GB,
       .fp32_flops = 12.7 * T, .tf32_flops = 12.7 * T, .bf16_flops = 25.5 * T, .fp16_flops = 25.5 * T,
       .fp8_flops = 0, .int8_ops = 101.9 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA GeForce RTX 3060 product specifications; tensor rates derived from the NVIDIA "
                 "Ampere GA102 GPU architecture whitepaper per-SM rates (FP32 accumulate)"},
      // GeForce RTX 3090: whitepaper Appendix A, FP16/BF16 "with FP32 accumulate" column (71 dense).
      // NVLink bridge: 112.5 GB/s total between a pair -> 56.25 GB/s per direction.
      {.id = "rtx-3090", .name = "NVIDIA GeForce RTX 3090", .architecture = "ampere",
       .compute_capability_major = 8, .compute_capability_minor = 6, .gpu_class = consumer,
       .memory_bytes = mib(24576), .memory_bandwidth_bytes_per_s = 936 * GB,
       .fp32_flops = 35.6 * T, .tf32_flops = 35.6 * T, .bf16_flops = 71 * T, .fp16_flops = 71 * T,
       .fp8_flops = 0, .int8_ops = 284 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "nvlink3", .gpu_link_bytes_per_s = 56.25 * GB,
       .source = "NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A (GeForce RTX 3090)"},
      // GeForce RTX 4060 Ti 16GB (AD106, 34 SMs, 2.535 GHz, PCIe 4.0 x8). Not in the Ada
      // whitepaper appendix: tensor = Ada per-SM rates x 34 x 2.535 GHz (matches NVIDIA's 353
      // sparse "AI TOPS"), FP32 accumulate.
      {.id = "rtx-4060-ti-16gb", .name = "NVIDIA GeForce RTX 4060 Ti 16GB", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = consumer,
       .memory_bytes = mib(16380), .memory_bandwidth_bytes_per_s = 288 * GB,
       .fp32_flops = 22.1 * T, .tf32_flops = 22.1 * T, .bf16_flops = 44.1 * T, .fp16_flops = 44.1 * T,
       .fp8_flops = 88.3 * T, .int8_ops = 176.5 * T,
       .pcie_generation = 4, .pcie_lanes = 8, .host_link_bytes_per_s = pcie_bytes_per_s(4, 8),
       .gpu_link = "pcie", .gpu_link_bytes_per_s = pcie_bytes_per_s(4, 8),
       .source = "NVIDIA GeForce RTX 4060 Ti product specifications; tensor rates derived from the NVIDIA "
                 "Ada Lovelace architecture whitepaper per-SM rates (FP32 accumulate)"},
      // GeForce RTX 4070 Ti SUPER (AD103, 66 SMs, 2.61 GHz): derived like the 4060 Ti (706 AI TOPS).
      {.id = "rtx-4070-ti-super", .name = "NVIDIA GeForce RTX 4070 Ti SUPER", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = consumer,
       .memory_bytes = mib(16376), .memory_bandwidth_bytes_per_s = 672 * GB,
       .fp32_flops = 44.1 * T, .tf32_flops = 44.1 * T, .bf16_flops = 88.2 * T, .fp16_flops = 88.2 * T,
       .fp8_flops = 176.4 * T, .int8_ops = 352.8 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA GeForce RTX 4070 Ti SUPER product specifications; tensor rates derived from the "
                 "NVIDIA Ada Lovelace architecture whitepaper per-SM rates (FP32 accumulate)"},
      // GeForce RTX 4080 (16GB): whitepaper Appendix A, FP32-accumulate column.
      {.id = "rtx-4080", .name = "NVIDIA GeForce RTX 4080", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = consumer,
       .memory_bytes = mib(16376), .memory_bandwidth_bytes_per_s = 716.8 * GB,
       .fp32_flops = 48.7 * T, .tf32_flops = 48.7 * T, .bf16_flops = 97.5 * T, .fp16_flops = 97.5 * T,
       .fp8_flops = 194.9 * T, .int8_ops = 389.9 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA Ada Lovelace architecture whitepaper, Appendix A (GeForce RTX 4080)"},
      // GeForce RTX 4090: whitepaper Appendix A, FP32-accumulate column (FP16-accumulate is 330.3).
      {.id = "rtx-4090", .name = "NVIDIA GeForce RTX 4090", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = consumer,
       .memory_bytes = mib(24564), .memory_bandwidth_bytes_per_s = 1008 * GB,
       .fp32_flops = 82.6 * T, .tf32_flops = 82.6 * T, .bf16_flops = 165.2 * T, .fp16_flops = 165.2 * T,
       .fp8_flops = 330.3 * T, .int8_ops = 660.6 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA Ada Lovelace architecture whitepaper, Appendix A (GeForce RTX 4090)"},
      // GeForce RTX 5070 Ti (GB203, 70 SMs, 2.452 GHz; 1406 sparse FP4 "AI TOPS"). FP32 accumulate.
      {.id = "rtx-5070-ti", .name = "NVIDIA GeForce RTX 5070 Ti", .architecture = "blackwell",
       .compute_capability_major = 12, .compute_capability_minor = 0, .gpu_class = consumer,
       .memory_bytes = mib(16303), .memory_bandwidth_bytes_per_s = 896 * GB,
       .fp32_flops = 43.9 * T, .tf32_flops = 43.9 * T, .bf16_flops = 87.9 * T, .fp16_flops = 87.9 * T,
       .fp8_flops = 175.8 * T, .int8_ops = 351.5 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen5x16,
       .source = "derived: RTX Blackwell whitepaper per-SM tensor rate x 70 SMs x 2.452 GHz boost; memory from nvidia-smi; 896 GB/s from NVIDIA product page"},
      // GeForce RTX 5080 (GB203, 84 SMs, 2.617 GHz; 1801 AI TOPS). FP32 accumulate.
      {.id = "rtx-5080", .name = "NVIDIA GeForce RTX 5080", .architecture = "blackwell",
       .compute_capability_major = 12, .compute_capability_minor = 0, .gpu_class = consumer,
       .memory_bytes = mib(16303), .memory_bandwidth_bytes_per_s = 960 * GB,
       .fp32_flops = 56.3 * T, .tf32_flops = 56.3 * T, .bf16_flops = 112.6 * T, .fp16_flops = 112.6 * T,
       .fp8_flops = 225.1 * T, .int8_ops = 450.2 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen5x16,
       .source = "derived: RTX Blackwell whitepaper per-SM tensor rate x 84 SMs x 2.617 GHz boost; 960 GB/s from NVIDIA product page"},
      // GeForce RTX 5090 (GB202, 170 SMs, 2.407 GHz; 3352 AI TOPS). FP32 accumulate (FP16-acc 419).
      {.id = "rtx-5090", .name = "NVIDIA GeForce RTX 5090", .architecture = "blackwell",
       .compute_capability_major = 12, .compute_capability_minor = 0, .gpu_class = consumer,
       .memory_bytes = mib(32607), .memory_bandwidth_bytes_per_s = 1792 * GB,
       .fp32_flops = 104.8 * T, .tf32_flops = 104.8 * T, .bf16_flops = 209.5 * T, .fp16_flops = 209.5 * T,
       .fp8_flops = 419 * T, .int8_ops = 838 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen5x16,
       .source = "NVIDIA RTX Blackwell GPU architecture whitepaper, Appendix A (GeForce RTX 5090)"},
      // T4: Turing tensor cores do FP16 (65 TFLOPS mixed precision) and INT8, no BF16/TF32.
      // nvidia-smi reports 15,360 MiB (15,109 MiB on some drivers with ECC accounting).
      {.id = "t4", .name = "NVIDIA T4", .architecture = "turing",
       .compute_capability_major = 7, .compute_capability_minor = 5, .gpu_class = datacenter,
       .memory_bytes = mib(15360), .memory_bandwidth_bytes_per_s = 320 * GB,
       .fp32_flops = 8.1 * T, .tf32_flops = 0, .bf16_flops = 0, .fp16_flops = 65 * T,
       .fp8_flops = 0, .int8_ops = 130 * T,
       .pcie_generation = 3, .pcie_lanes = 16, .host_link_bytes_per_s = kGen3x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen3x16,
       .source = "NVIDIA T4 Tensor Core GPU datasheet"},
      // L4: the datasheet prints sparse tensor figures only (120/242/485/485): halved.
      {.id = "l4", .name = "NVIDIA L4", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = datacenter,
       .memory_bytes = mib(23034), .memory_bandwidth_bytes_per_s = 300 * GB,
       .fp32_flops = 30.3 * T, .tf32_flops = 60 * T, .bf16_flops = 121 * T, .fp16_flops = 121 * T,
       .fp8_flops = 242.5 * T, .int8_ops = 242.5 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA L4 Tensor Core GPU datasheet"},
      // A10 (GA102, datacenter part: full-rate FP32 accumulate). Datasheet dense | sparse.
      {.id = "a10", .name = "NVIDIA A10", .architecture = "ampere",
       .compute_capability_major = 8, .compute_capability_minor = 6, .gpu_class = datacenter,
       .memory_bytes = mib(23028), .memory_bandwidth_bytes_per_s = 600 * GB,
       .fp32_flops = 31.2 * T, .tf32_flops = 62.5 * T, .bf16_flops = 125 * T, .fp16_flops = 125 * T,
       .fp8_flops = 0, .int8_ops = 250 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA A10 Tensor Core GPU datasheet"},
      // L40S: datasheet dense | sparse (BF16 362.05 | 733). No NVLink.
      {.id = "l40s", .name = "NVIDIA L40S", .architecture = "ada",
       .compute_capability_major = 8, .compute_capability_minor = 9, .gpu_class = datacenter,
       .memory_bytes = mib(46068), .memory_bandwidth_bytes_per_s = 864 * GB,
       .fp32_flops = 91.6 * T, .tf32_flops = 183 * T, .bf16_flops = 362.05 * T, .fp16_flops = 362.05 * T,
       .fp8_flops = 733 * T, .int8_ops = 733 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "pcie", .gpu_link_bytes_per_s = kGen4x16,
       .source = "NVIDIA L40S GPU datasheet"},
      // V100 SXM2 32GB: 125 TFLOPS "Tensor Performance" is FP16 in, FP32 accumulate; Volta has no
      // BF16/TF32 and no INT8 tensor cores (INT8 left 0). NVLink2: 300 GB/s total -> 150 per direction.
      {.id = "v100", .name = "NVIDIA Tesla V100 SXM2 32GB", .architecture = "volta",
       .compute_capability_major = 7, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(32480), .memory_bandwidth_bytes_per_s = 900 * GB,
       .fp32_flops = 15.7 * T, .tf32_flops = 0, .bf16_flops = 0, .fp16_flops = 125 * T,
       .fp8_flops = 0, .int8_ops = 0,
       .pcie_generation = 3, .pcie_lanes = 16, .host_link_bytes_per_s = kGen3x16,
       .gpu_link = "nvlink2", .gpu_link_bytes_per_s = 150 * GB,
       .source = "NVIDIA Tesla V100 GPU datasheet (V100 SXM2)"},
      // A100 SXM 40GB / 80GB: datasheet dense | sparse. NVLink3 600 GB/s total -> 300 per direction.
      {.id = "a100-40gb", .name = "NVIDIA A100 SXM4 40GB", .architecture = "ampere",
       .compute_capability_major = 8, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(40960), .memory_bandwidth_bytes_per_s = 1555 * GB,
       .fp32_flops = 19.5 * T, .tf32_flops = 156 * T, .bf16_flops = 312 * T, .fp16_flops = 312 * T,
       .fp8_flops = 0, .int8_ops = 624 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "nvlink3", .gpu_link_bytes_per_s = 300 * GB,
       .source = "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM)"},
      {.id = "a100-80gb", .name = "NVIDIA A100 SXM4 80GB", .architecture = "ampere",
       .compute_capability_major = 8, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(81920), .memory_bandwidth_bytes_per_s = 2039 * GB,
       .fp32_flops = 19.5 * T, .tf32_flops = 156 * T, .bf16_flops = 312 * T, .fp16_flops = 312 * T,
       .fp8_flops = 0, .int8_ops = 624 * T,
       .pcie_generation = 4, .pcie_lanes = 16, .host_link_bytes_per_s = kGen4x16,
       .gpu_link = "nvlink3", .gpu_link_bytes_per_s = 300 * GB,
       .source = "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM)"},
      // H100 PCIe: datasheet sparse figures (756/1513/3026) halved. NVLink only through a 2-card
      // bridge (600 GB/s total -> 300 per direction); without a bridge, peers talk over PCIe.
      {.id = "h100-pcie", .name = "NVIDIA H100 PCIe", .architecture = "hopper",
       .compute_capability_major = 9, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(81559), .memory_bandwidth_bytes_per_s = 2000 * GB,
       .fp32_flops = 51 * T, .tf32_flops = 378 * T, .bf16_flops = 756 * T, .fp16_flops = 756 * T,
       .fp8_flops = 1513 * T, .int8_ops = 1513 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "nvlink4", .gpu_link_bytes_per_s = 300 * GB,
       .source = "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe)"},
      // H100 SXM: dense figures from the H100 whitepaper (the datasheet's 1979* BF16 is sparse).
      // NVLink4 900 GB/s total -> 450 per direction.
      {.id = "h100-sxm", .name = "NVIDIA H100 SXM5 80GB", .architecture = "hopper",
       .compute_capability_major = 9, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(81559), .memory_bandwidth_bytes_per_s = 3350 * GB,
       .fp32_flops = 66.9 * T, .tf32_flops = 494.7 * T, .bf16_flops = 989.4 * T, .fp16_flops = 989.4 * T,
       .fp8_flops = 1978.9 * T, .int8_ops = 1978.9 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "nvlink4", .gpu_link_bytes_per_s = 450 * GB,
       .source = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM); dense values from the NVIDIA H100 "
                 "Tensor Core GPU architecture whitepaper"},
      // H200 SXM: same GH100 compute as H100 SXM (datasheet 1,979* BF16 sparse), 141 GB HBM3e.
      {.id = "h200", .name = "NVIDIA H200 SXM 141GB", .architecture = "hopper",
       .compute_capability_major = 9, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(143771), .memory_bandwidth_bytes_per_s = 4800 * GB,
       .fp32_flops = 66.9 * T, .tf32_flops = 494.7 * T, .bf16_flops = 989.4 * T, .fp16_flops = 989.4 * T,
       .fp8_flops = 1978.9 * T, .int8_ops = 1978.9 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "nvlink4", .gpu_link_bytes_per_s = 450 * GB,
       .source = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)"},
      // B200 (HGX B200, 1000 W): per-GPU column of NVIDIA's HGX B200 table, sparse figures halved
      // (TF32 2.2*, BF16 4.5*, FP8 9*, INT8 9*); 180 GB HBM3e at 7.7 TB/s (launch material said 8).
      // NVLink5 1.8 TB/s total -> 900 GB/s per direction.
      {.id = "b200", .name = "NVIDIA B200 180GB", .architecture = "blackwell",
       .compute_capability_major = 10, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = mib(183359), .memory_bandwidth_bytes_per_s = 7700 * GB,
       .fp32_flops = 75 * T, .tf32_flops = 1100 * T, .bf16_flops = 2250 * T, .fp16_flops = 2250 * T,
       .fp8_flops = 4500 * T, .int8_ops = 4500 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "nvlink5", .gpu_link_bytes_per_s = 900 * GB,
       .source = "NVIDIA HGX B200 datasheet (per-GPU specifications)"},
      // MI300X: AMD data sheet, dense (sparse is 2x). rocm-smi reports 205,822,885,888 bytes.
      // FP32 is the vector (packed) rate. Infinity Fabric: 7 links x 64 GB/s per direction.
      {.id = "mi300x", .name = "AMD Instinct MI300X", .vendor = "amd", .architecture = "cdna3",
       .compute_capability_major = 0, .compute_capability_minor = 0, .gpu_class = datacenter,
       .memory_bytes = 205822885888, .memory_bandwidth_bytes_per_s = 5300 * GB,
       .fp32_flops = 163.4 * T, .tf32_flops = 653.7 * T, .bf16_flops = 1307.4 * T, .fp16_flops = 1307.4 * T,
       .fp8_flops = 2614.9 * T, .int8_ops = 2614.9 * T,
       .pcie_generation = 5, .pcie_lanes = 16, .host_link_bytes_per_s = kGen5x16,
       .gpu_link = "infinity-fabric", .gpu_link_bytes_per_s = 448 * GB,
       .source = "AMD Instinct MI300X accelerator data sheet"},
  };
}

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

// Extra spellings (normalized) beyond each id's own normalized form, including the
// names nvidia-smi prints. Bare family names pick the variant most people rent.
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"3060", "rtx-3060-12gb"},           {"4060ti", "rtx-4060-ti-16gb"},
    {"4070tis", "rtx-4070-ti-super"},    {"h100", "h100-sxm"},
    {"h100sxm5", "h100-sxm"},            {"h10080gbhbm3", "h100-sxm"},
    {"h200sxm", "h200"},                 {"h200sxm141gb", "h200"},
    {"a100", "a100-80gb"},               {"a100sxm480gb", "a100-80gb"},
    {"a100sxm440gb", "a100-40gb"},       {"v100sxm232gb", "v100"},
    {"v10032gb", "v100"},                {"b200180gb", "b200"},
};

using detail::edit_distance;

}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = build_catalog();
  return catalog;
}

const GpuSpec& find_gpu(std::string_view name) {
  const auto& catalog = gpu_catalog();
  for (const GpuSpec& g : catalog) {
    if (g.id == name) return g;
  }
  // Bounded so a pasted megabyte does not cost quadratic edit-distance work below.
  const std::string key = normalize(name.substr(0, 200));
  auto by_id = [&](std::string_view id) -> const GpuSpec& {
    return *std::find_if(catalog.begin(), catalog.end(), [&](const GpuSpec& g) { return g.id == id; });
  };
  if (!key.empty()) {
    for (const GpuSpec& g : catalog) {
      if (normalize(g.id) == key || normalize(g.name) == key) return g;
    }
    for (const auto& [alias, id] : kAliases) {
      if (alias == key) return by_id(id);
    }
  }
  // Unknown: list every id, the likeliest first (containment, then edit distance).
  std::vector<std::pair<std::size_t, std::string_view>> ranked;
  for (const GpuSpec& g : catalog) {
    const std::string id = normalize(g.id);
    const bool contains = !key.empty() && (id.find(key) != std::string::npos || key.find(id) != std::string::npos);
    ranked.emplace_back(contains ? 0 : 1 + edit_distance(key, id), g.id);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string known;
  for (const auto& [score, id] : ranked) {
    if (!known.empty()) known += ", ";
    known += id;
  }
  const std::string shown = name.size() > 80 ? std::string(name.substr(0, 80)) + "..." : std::string(name);
  throw InputError(fmt::format("unknown GPU '{}'; known: {} (or describe the card with --vram or --gpu-spec)",
                               shown, known));
}

}  // namespace trainfit
