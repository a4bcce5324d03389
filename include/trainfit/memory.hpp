#pragma once
// The memory model of one training step on one GPU (docs/model.md defines every term).
#include <cstdint>
#include <string>
#include <vector>

#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {

enum class Phase { forward, backward, optimizer };
std::string to_string(Phase p);

// One category of the breakdown, at the moment of the peak.
struct MemoryTerm {
  std::string category;  // weights, quant_constants, adapters, gradients, optimizer_states, gradient_buckets
                         // (DDP), gathered_weights (FSDP),
                         // master_weights, activations, logits_and_loss, transient, cublas_workspace
  std::int64_t bytes = 0;
};

struct PhasePeak {
  Phase phase = Phase::forward;
  std::int64_t allocated_bytes = 0;  // highest torch.cuda.memory_allocated() in the phase
  std::string moment;                // where in the phase it happens ("cross-entropy backward")
};

// What the training objective adds to a step (docs/model.md, "Objectives"), per GPU.
struct ObjectiveMemory {
  std::int64_t trained_sequences = 0;  // sequences a micro-batch runs through the policy with autograd
  // Sequences a micro-batch (or, for grpo, its scoring) runs through a model without autograd:
  // the reference's, and KTO's KL batch through the policy.
  std::int64_t no_grad_sequences = 0;
  std::int64_t reference_weights_bytes = 0;  // a frozen copy (reference copy)
  std::int64_t reward_weights_bytes = 0;     // PPO's reward model
  // PPO's value model, trained beside the policy: its weights, gradients (at the optimizer step)
  // and optimizer states, and its parameters (counted in trainable_parameters).
  std::int64_t value_weights_bytes = 0, value_gradients_bytes = 0, value_optimizer_states_bytes = 0;
  std::int64_t value_parameters = 0;
};

struct MemoryEstimate {
  std::int64_t peak_allocated_bytes = 0;  // torch.cuda.max_memory_allocated() of a steady-state step
  std::int64_t peak_reserved_bytes = 0;   // torch.cuda.max_memory_reserved()
  std::int64_t device_used_bytes = 0;     // NVML used memory: reserved + CUDA context
  std::int64_t cuda_context_bytes = 0;
  std::int64_t weights_loaded_bytes = 0;  // memory_allocated() after loading, before the first step
  Phase peak_phase = Phase::forward;
  std::string peak_moment;
  std::vector<MemoryTerm> breakdown;      // sums to peak_allocated_bytes
  std::vector<PhasePeak> phases;          // forward, backward, optimizer
  std::int64_t trainable_parameters = 0;
  std::int64_t total_parameters = 0;
  // LoRA on a mixture-of-experts model whose targets leave the routed experts out (all-linear does:
  // transformers 5 stores them as fused 3-D tensors, not nn.Linear): the parameters adapters on them
  // too would add (PEFT's target_parameters, r x (in + out) per expert and projection). 0 otherwise.
  std::int64_t untargeted_expert_adapter_parameters = 0;
  // The busiest GPU over the whole run, which decides whether it runs out: under DDP (and zero1,
  // which runs DDP) the second step holds the reducer's first gradient buckets beside the ones it
  // rebuilds, on one rank at least, through that step's backward: peak_allocated_bytes plus one
  // copy of the buckets (measured on two H200s: +2,944 MiB for Qwen2.5-1.5B, +6,128 MiB for
  // Llama-3.2-3B). Otherwise peak_allocated_bytes.
  std::int64_t busiest_peak_allocated_bytes = 0;
  // That GPU's device use, NVML's figure on it: its extra allocations (the buckets above) are
  // reserved beside the step's, and the CUDA context and NCCL's buffers are the same on every
  // GPU. The verdict is judged on these two busiest figures. Otherwise device_used_bytes.
  std::int64_t busiest_device_used_bytes = 0;
  // The boundary (docs/model.md): when the first optimizer step's largest state tensor lands in the
  // first step's fp32 logits segment (no activation's freed block holds it), the later steps' fp32
  // logits need a segment of their own beside it: its size, which the step must find on top of the
  // busiest peak to run at all. 0 when the states land elsewhere.
  std::int64_t later_logits_segment_bytes = 0;
  // Host memory one host needs for offloaded states (every GPU of the host; 0 without offload).
  std::int64_t host_bytes = 0;
  // With pipeline parallelism, the stage these figures are for: the busiest (0 = the first).
  std::int64_t pipeline_stage = 0;
  ObjectiveMemory objective;
};

MemoryEstimate estimate_memory(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu);

}  // namespace trainfit
