#pragma once
// The memory that depends on the card and the libraries rather than on the step's tensors
// (memory/step_shape.hpp has those): what estimate_memory adds once it knows the card.
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {

// cuBLAS's workspace for one (thread, stream), as PyTorch sizes it (aten/src/ATen/cuda/
// CublasHandlePool.cpp, parseChosenWorkspaceSize, with CUBLAS_WORKSPACE_CONFIG unset): ":4096:8"
// on compute capability 9.0 and newer, 8 x 4096 KiB = 32 MiB.
inline constexpr double kCublasWorkspaceHopper = 4096.0 * 8 * static_cast<double>(kKiB);
// ... and ":4096:2:16:8" before it, 2 x 4096 KiB + 8 x 16 KiB = 8.125 MiB.
inline constexpr double kCublasWorkspaceBeforeHopper = (4096.0 * 2 + 16.0 * 8) * static_cast<double>(kKiB);
// The first compute capability that gets the larger workspace.
inline constexpr int kCublasLargeWorkspaceMajor = 9;
// How many workspaces a training step makes: PyTorch gives each (thread, stream) its own, and the
// forward runs on the main thread while the backward runs on autograd's device thread.
inline constexpr double kCublasWorkspacesPerStep = 2;
// cuBLASLt's workspace, allocated once. Measured on the H200 (torch 2.11): 65 MiB in all, the two
// 32 MiB cuBLAS workspaces and this.
inline constexpr double kCublasLtWorkspace = 1.0 * static_cast<double>(kMiB);

// The cuBLAS and cuBLASLt workspaces a training step allocates on this card (through the caching
// allocator, so they count in max_memory_allocated).
double cublas_workspace_bytes(const GpuSpec& gpu);

// CUDA context, driver and library memory outside PyTorch's allocator, as NVML sees it.
// Measured on the H200 (torch 2.11, CUDA 13): NVML used - max_memory_reserved = 1382 MiB.
// Other cards are assumed alike until measured (docs/model.md, "CUDA context").
inline constexpr double kCudaContextBytes = 1382.0 * static_cast<double>(kMiB);
// NCCL's communicator buffers, also outside the allocator: NVML used - max_memory_reserved grew
// by 846 MiB (842-846 over 16 DDP and FSDP runs) on two NVLinked H200s (NCCL 2.28.9, 2026-11-30).
// The buffers scale with NCCL's channels and peers; other machines are assumed alike.
inline constexpr double kNcclBytes = 846.0 * static_cast<double>(kMiB);

}  // namespace trainfit::detail
