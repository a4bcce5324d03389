// Writes a synthetic Kineto trace of about the size asked (tests/support/synthetic_trace.hpp) for
// scripts/trace-speed.sh: `trainfit_trace_gen OUT.json MEGABYTES`.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "support/synthetic_trace.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: trainfit_trace_gen OUT.json MEGABYTES\n";
    return 2;
  }
  const double megabytes = std::atof(argv[2]);
  trainfit::testing::SyntheticTrace t;
  t.kernels = {
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "kernel", 40},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "kernel", 6},
      {"pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "kernel", 25},
      {"ncclDevKernel_Generic", "kernel", 2}};
  t.repeats = 2000;  // 8000 kernels a step: about 7 MB of JSON
  t.steps = std::max(1, static_cast<int>(megabytes / 7.0 + 0.5));
  std::ofstream out(argv[1], std::ios::binary);
  trainfit::testing::write_synthetic_trace(
      t, [&](std::string_view piece) { out.write(piece.data(), static_cast<std::streamsize>(piece.size())); });
  if (!out) {
    std::cerr << "cannot write " << argv[1] << "\n";
    return 3;
  }
  return 0;
}
