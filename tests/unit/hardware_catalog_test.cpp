// The compiled-in GPU catalogue: completeness, spot checks against datasheets and
// measured nvidia-smi totals, and forgiving name lookup.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

TEST(GpuCatalog, HasEveryRequiredCard) {
  for (const char* id : {"rtx-3060-12gb", "rtx-3090", "rtx-4060-ti-16gb", "rtx-4070-ti-super", "rtx-4080",
                         "rtx-4090", "rtx-5070-ti", "rtx-5080", "rtx-5090", "t4", "l4", "a10", "l40s", "v100",
                         "a100-40gb", "a100-80gb", "h100-pcie", "h100-sxm", "h200", "b200", "mi300x"}) {
    EXPECT_EQ(find_gpu(id).id, id);
  }
}

TEST(GpuCatalog, EveryEntryIsComplete) {
  std::set<std::string> ids;
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.id);
    EXPECT_TRUE(ids.insert(g.id).second) << "duplicate id";
    EXPECT_FALSE(g.name.empty());
    EXPECT_FALSE(g.architecture.empty());
    EXPECT_FALSE(g.source.empty());
    EXPECT_TRUE(g.vendor == "nvidia" || g.vendor == "amd");
    EXPECT_GT(g.memory_bytes, 8 * kGiB);
    EXPECT_LT(g.memory_bytes, 256 * kGiB);
    EXPECT_GT(g.memory_bandwidth_bytes_per_s, 100e9);
    EXPECT_LT(g.memory_bandwidth_bytes_per_s, 10e12);
    EXPECT_GT(g.fp32_flops, 1e12);
    EXPECT_GT(g.fp16_flops, 0);
    // Only Turing and Volta lack BF16 tensor cores.
    if (g.architecture == "turing" || g.architecture == "volta") {
      EXPECT_EQ(g.bf16_flops, 0);
      EXPECT_EQ(g.tf32_flops, 0);
    } else {
      EXPECT_GT(g.bf16_flops, 0);
      EXPECT_GT(g.tf32_flops, 0);
      EXPECT_EQ(g.bf16_flops, g.fp16_flops);
      // Dense tensor BF16 is never below CUDA-core FP32, and never implausibly far above it
      // (a sparse figure slipping in would show as a doubled ratio).
      EXPECT_GE(g.bf16_flops, g.fp32_flops);
      EXPECT_LE(g.bf16_flops, 32 * g.fp32_flops);
    }
    EXPECT_GE(g.fp8_flops, 0);
    EXPECT_GE(g.int8_ops, 0);
    EXPECT_GE(g.pcie_generation, 3);
    EXPECT_TRUE(g.pcie_lanes == 8 || g.pcie_lanes == 16);
    EXPECT_DOUBLE_EQ(g.host_link_bytes_per_s, pcie_bytes_per_s(g.pcie_generation, g.pcie_lanes));
    EXPECT_FALSE(g.gpu_link.empty());
    EXPECT_GT(g.gpu_link_bytes_per_s, 0);
    if (g.vendor == "nvidia") {
      EXPECT_GE(g.compute_capability_major, 7);
    }
  }
  EXPECT_GE(ids.size(), 21U);
}

TEST(GpuCatalog, SpotChecksAgainstDatasheetsAndNvidiaSmi) {
  const GpuSpec& h200 = find_gpu("h200");
  EXPECT_EQ(h200.memory_bytes, 143771 * kMiB);  // nvidia-smi total
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.bf16_flops, 989.4e12);  // dense, not the 1979 sparse figure
  EXPECT_DOUBLE_EQ(h200.fp8_flops, 1978.9e12);
  EXPECT_EQ(h200.compute_capability_major, 9);
  EXPECT_EQ(h200.gpu_link, "nvlink4");
  EXPECT_DOUBLE_EQ(h200.gpu_link_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(h200.host_link_bytes_per_s, 64e9);

  const GpuSpec& r5070 = find_gpu("rtx-5070-ti");
  EXPECT_EQ(r5070.memory_bytes, 16303 * kMiB);
  EXPECT_DOUBLE_EQ(r5070.memory_bandwidth_bytes_per_s, 896e9);
  EXPECT_EQ(r5070.compute_capability_major, 12);
  EXPECT_EQ(r5070.compute_capability_minor, 0);
  EXPECT_EQ(r5070.gpu_class, GpuClass::consumer);
  EXPECT_EQ(r5070.pcie_generation, 5);

  const GpuSpec& h100 = find_gpu("h100-sxm");
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth_bytes_per_s, 3.35e12);
  EXPECT_EQ(h100.memory_bytes, 81559 * kMiB);
  EXPECT_DOUBLE_EQ(h100.bf16_flops, 989.4e12);

  const GpuSpec& r4090 = find_gpu("rtx-4090");
  EXPECT_EQ(r4090.memory_bytes, 24564 * kMiB);
  EXPECT_DOUBLE_EQ(r4090.bf16_flops, 165.2e12);  // FP32 accumulate, not the 330.3 FP16-accumulate rate
  EXPECT_DOUBLE_EQ(r4090.memory_bandwidth_bytes_per_s, 1008e9);

  EXPECT_DOUBLE_EQ(find_gpu("a100-80gb").memory_bandwidth_bytes_per_s, 2039e9);
  EXPECT_DOUBLE_EQ(find_gpu("a100-80gb").bf16_flops, 312e12);
  EXPECT_EQ(find_gpu("t4").bf16_flops, 0);
  EXPECT_DOUBLE_EQ(find_gpu("t4").fp16_flops, 65e12);
  EXPECT_EQ(find_gpu("v100").bf16_flops, 0);
  EXPECT_DOUBLE_EQ(find_gpu("l40s").bf16_flops, 362.05e12);
  EXPECT_EQ(find_gpu("rtx-4060-ti-16gb").pcie_lanes, 8);
  EXPECT_EQ(find_gpu("b200").compute_capability_major, 10);
  EXPECT_EQ(find_gpu("mi300x").vendor, "amd");
  EXPECT_EQ(find_gpu("mi300x").compute_capability_major, 0);
  EXPECT_EQ(find_gpu("mi300x").memory_bytes, 205822885888);
}

TEST(GpuCatalog, PcieRates) {
  EXPECT_DOUBLE_EQ(pcie_bytes_per_s(3, 16), 16e9);
  EXPECT_DOUBLE_EQ(pcie_bytes_per_s(4, 16), 32e9);
  EXPECT_DOUBLE_EQ(pcie_bytes_per_s(4, 8), 16e9);
  EXPECT_DOUBLE_EQ(pcie_bytes_per_s(5, 16), 64e9);
  EXPECT_EQ(pcie_bytes_per_s(0, 16), 0);
  EXPECT_EQ(pcie_bytes_per_s(7, 16), 0);
  EXPECT_EQ(pcie_bytes_per_s(4, 0), 0);
}

TEST(GpuLookup, ForgivingNames) {
  struct Case {
    const char* query;
    const char* id;
  };
  for (const Case& c : {Case{"RTX 5070 Ti", "rtx-5070-ti"}, Case{"5070ti", "rtx-5070-ti"},
                        Case{"rtx_5070_ti", "rtx-5070-ti"}, Case{"NVIDIA GeForce RTX 5070 Ti", "rtx-5070-ti"},
                        Case{"geforce 4090", "rtx-4090"}, Case{"RTX4090", "rtx-4090"}, Case{"H100", "h100-sxm"},
                        Case{"h100 pcie", "h100-pcie"}, Case{"NVIDIA H100 80GB HBM3", "h100-sxm"},
                        Case{"a100", "a100-80gb"}, Case{"A100 40GB", "a100-40gb"},
                        Case{"NVIDIA A100-SXM4-40GB", "a100-40gb"}, Case{"Tesla T4", "t4"},
                        Case{"Tesla V100-SXM2-32GB", "v100"}, Case{"nvidia h200", "h200"},
                        Case{"L40S", "l40s"}, Case{"AMD Instinct MI300X", "mi300x"}, Case{"MI300X", "mi300x"},
                        Case{"RTX 3060", "rtx-3060-12gb"}, Case{"4060 Ti", "rtx-4060-ti-16gb"},
                        Case{"RTX 4070 Ti SUPER", "rtx-4070-ti-super"}, Case{"NVIDIA B200", "b200"},
                        Case{"NVIDIA GeForce RTX 3090", "rtx-3090"}, Case{"NVIDIA A10", "a10"},
                        Case{"NVIDIA L4", "l4"}}) {
    EXPECT_EQ(find_gpu(c.query).id, c.id) << c.query;
  }
}

TEST(GpuLookup, UnknownNameListsCloseMatchesFirst) {
  try {
    find_gpu("rtx 5060");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("unknown GPU 'rtx 5060'; known: ", 0), 0U) << msg;
    // Every id is listed, and a near-miss ranks before an unrelated card.
    for (const GpuSpec& g : gpu_catalog()) EXPECT_NE(msg.find(g.id), std::string::npos) << g.id;
    EXPECT_LT(msg.find("rtx-5080"), msg.find("mi300x")) << msg;
  }
  try {
    find_gpu("h10");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    const auto known = msg.find("known: ");
    EXPECT_EQ(msg.find("h100", known), known + 7) << msg;  // a card containing the text comes first
  }
  EXPECT_THROW(find_gpu(""), InputError);
  EXPECT_THROW(find_gpu("nvidia"), InputError);
  EXPECT_THROW(find_gpu("xyz"), InputError);
  EXPECT_THROW(find_gpu(std::string(100000, 'x')), InputError);
}

// docs/gpus.md repeats the catalogue for users; keep its memory and bandwidth columns honest.
TEST(GpuCatalog, DocsTableMatchesCatalogue) {
  std::ifstream in(TRAINFIT_SOURCE_DIR "/docs/gpus.md");
  ASSERT_TRUE(in) << "docs/gpus.md missing";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string docs = buffer.str();
  for (const GpuSpec& g : gpu_catalog()) {
    const auto row_start = docs.find("| `" + g.id + "` |");
    ASSERT_NE(row_start, std::string::npos) << g.id << " has no row in docs/gpus.md";
    const std::string row = docs.substr(row_start, docs.find('\n', row_start) - row_start);
    // "143,771": digits grouped by three, built by appending (GCC 12 warns falsely on insert).
    const std::string digits = std::to_string(g.memory_bytes / kMiB);
    std::string mib;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) mib += ',';
      mib += digits[i];
    }
    EXPECT_NE(row.find("| " + mib + " MiB (" + format_bytes(g.memory_bytes) + ")"), std::string::npos) << row;
    std::ostringstream bw;
    bw << "| " << g.memory_bandwidth_bytes_per_s / 1e9 << " GB/s |";
    EXPECT_NE(row.find(bw.str()), std::string::npos) << row << " lacks " << bw.str();
  }
}

TEST(GpuLookup, ClassNames) {
  EXPECT_EQ(to_string(GpuClass::consumer), "consumer");
  EXPECT_EQ(to_string(GpuClass::workstation), "workstation");
  EXPECT_EQ(to_string(GpuClass::datacenter), "datacenter");
}

}  // namespace
}  // namespace trainfit
