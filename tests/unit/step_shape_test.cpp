// The parts of a step's description that stand on their own: the caching allocator's block
// rounding, PEFT's LoRA targeting rule, and the card-dependent library workspaces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/memory_model.hpp"
#include "step/step.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

using namespace caching_allocator;
constexpr double MiB = 1048576.0;

TEST(AllocatorBlock, SmallRequestsRoundUpTo512Bytes) {
  EXPECT_EQ(allocator_block(1), 512);
  EXPECT_EQ(allocator_block(512), 512);
  EXPECT_EQ(allocator_block(513), 1024);
}

TEST(AllocatorBlock, OwnSegmentsStartAtTenMiB) {
  // Just under 10 MiB the block is the rounded request, although a 2 MiB-rounded segment
  // would leave only 512 bytes (which would then be counted).
  EXPECT_EQ(allocator_block(kMinLargeAlloc - kMinBlockSize), 10 * MiB - 512);
  // 10 MiB - 1 byte rounds up to 10 MiB, already a whole segment.
  EXPECT_EQ(allocator_block(kMinLargeAlloc - 1), 10 * MiB);
  // From 10 MiB a request has its own segment, rounded to 2 MiB: its 512-byte tail is counted.
  EXPECT_EQ(allocator_block(kMinLargeAlloc + kRoundLarge - kMinBlockSize), 12 * MiB);
}

TEST(AllocatorBlock, ASegmentTailOfUpTo1MiBStaysInTheBlock) {
  // Qwen2.5-3B's MLP matrices are exactly 43 MiB: a 44 MiB segment, its 1 MiB tail not split off
  // (measured: 108.5 MiB over 108 of them on the H200).
  EXPECT_EQ(allocator_block(43 * MiB), 44 * MiB);
  // 512 bytes less leaves a tail just over kSmallSize, which becomes a block of its own.
  EXPECT_EQ(allocator_block(43 * MiB - kMinBlockSize), 43 * MiB - 512);
  EXPECT_EQ(kSmallSize, 1 * MiB);
}

TEST(AllocatedFor, RoundsEachTensorOnItsOwn) {
  // Two 1-byte-per-token tensors over 100 tokens: two 512-byte blocks, not one.
  EXPECT_EQ(allocated_for(std::vector<double>{1.0, 1.0}, 100), 1024);
}

TEST(AllocatedFor, ByDistinctSizesIsTheSumInOrder) {
  // Repeated sizes are rounded once and counted; the sum is the ordered sum's, to the bit, also
  // past 2^53 bytes where doubles no longer hold every whole number (then it is the ordered sum).
  const TensorSizes sizes = tensor_sizes({4096, 1024, 4096, 64, 4096, 1024, 18944, 3584.5, 64, 1e-3});
  EXPECT_EQ(sizes.distinct.size(), 6u);
  EXPECT_EQ(sizes.distinct[0].count, 3);
  for (const double tokens : {1.0, 7.0, 512.0, 2560.0, 65536.0, 16777216.0, 1e9, 1e12, 3e13, 1e15}) {
    EXPECT_EQ(allocated_for(sizes, tokens), allocated_for(sizes.ordered, tokens)) << tokens;
  }
}

TEST(LoraTargets, NamesMatchTheEndOfTheModulePathAtADot) {
  EXPECT_TRUE(module_name_matches("v_proj", "v_proj"));
  EXPECT_TRUE(module_name_matches("self_attn.v_proj", "v_proj"));
  EXPECT_TRUE(module_name_matches("mlp.experts.down_proj", "experts.down_proj"));
  EXPECT_FALSE(module_name_matches("self_attn.kv_proj", "v_proj"));  // a suffix, but not at a dot
  EXPECT_FALSE(module_name_matches("mlp.gate_up_proj", "up_proj"));
  EXPECT_FALSE(module_name_matches("v_proj", "self_attn.v_proj"));
}

TEST(LoraTargets, AllLinearSkipsTheRoutedExperts) {
  LoraSetup lora;  // all-linear
  LinearModule dense{ModuleRole::attention_query, "q_proj", 2048, 4096, 1, false, 1.0};
  LinearModule router{ModuleRole::router, "gate", 2048, 128, 1, false, 1.0};
  LinearModule experts{ModuleRole::expert_gate, "experts.gate_proj", 2048, 768, 128, false, 8.0 / 128.0, false};
  EXPECT_TRUE(targets_module(lora, dense));
  EXPECT_TRUE(targets_module(lora, router));
  EXPECT_FALSE(targets_module(lora, experts));  // fused 3-D parameters, not nn.Linear
  lora.targets = {"q_proj", "v_proj"};
  EXPECT_TRUE(targets_module(lora, dense));
  EXPECT_FALSE(targets_module(lora, router));
  lora.targets = {"experts.gate_proj"};
  EXPECT_TRUE(targets_module(lora, experts));  // named, experts are matched
}

TEST(LayerLinears, MarkTheTargetsOnlyWhenAdaptersTrain) {
  const ModelSpec model = load_model("qwen3-30b-a3b");
  TrainingSetup s;
  s.lora.targets = {"q_proj", "v_proj"};
  const LayerLinears lora = layer_linears(model, s);
  EXPECT_EQ(lora.dense_layers + lora.moe_layers, static_cast<double>(model.num_layers));
  int targeted = 0;
  for (const auto& l : lora.moe) {
    targeted += l.lora_target ? 1 : 0;
    EXPECT_EQ(l.lora_target, l.module.name == "q_proj" || l.module.name == "v_proj") << l.module.name;
  }
  EXPECT_EQ(targeted, 2);

  s.method = Method::full;  // the base trains: no module carries an adapter
  for (const auto& l : layer_linears(model, s).moe) EXPECT_FALSE(l.lora_target) << l.module.name;
}

TEST(LayerLinears, ADenseModelHasOneKindOfLayer) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const LayerLinears ls = layer_linears(model, TrainingSetup{});
  EXPECT_TRUE(ls.moe.empty());
  EXPECT_EQ(ls.moe_layers, 0);
  EXPECT_EQ(ls.dense_layers, static_cast<double>(model.num_layers));
  EXPECT_EQ(ls.dense.size(), layer_linear_modules(model).size());
}

TEST(DescribeStep, LoraBranchesAreKeptForTheTargetedModulesOnly) {
  TrainingSetup s;
  s.lora.targets = {"q_proj", "v_proj"};
  const StepShape st = describe_step(load_model("qwen2.5-0.5b"), s).tensors;
  int a_outputs = 0;
  for (const auto& a : st.layer_activations) {
    const std::string name = a.name();
    EXPECT_EQ(a.lora_branch, name.find(" lora ") != std::string::npos) << name;
    if (!a.lora_branch) continue;
    EXPECT_TRUE(name.starts_with("q_proj ") || name.starts_with("v_proj ")) << name;
    if (name.ends_with("lora A output")) ++a_outputs;
  }
  EXPECT_EQ(a_outputs, 2);
}

TEST(CublasWorkspace, HopperAndNewerGet32MiBAWorkspace) {
  GpuSpec card;
  card.compute_capability_major = 9;
  EXPECT_EQ(cublas_workspace_bytes(card), 65 * MiB);  // measured on the H200: 2 x 32 MiB + 1 MiB
  card.compute_capability_major = 12;
  EXPECT_EQ(cublas_workspace_bytes(card), 65 * MiB);
  card.compute_capability_major = 8;
  EXPECT_EQ(cublas_workspace_bytes(card), 2 * 8.125 * MiB + 1 * MiB);
  card.compute_capability_major = 0;  // a card known only by its memory: the older default
  EXPECT_EQ(cublas_workspace_bytes(card), 2 * 8.125 * MiB + 1 * MiB);
}

TEST(CublasWorkspace, IsWhatThePlanCountsForTheCard) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  for (const char* id : {"h200", "a100-80gb", "rtx-5070-ti"}) {
    const GpuSpec& gpu = find_gpu(id);
    const MemoryEstimate e = estimate_memory(model, TrainingSetup{}, gpu);
    int counted = 0;
    for (const auto& b : e.breakdown) {
      if (b.category != "cublas_workspace") continue;
      ++counted;
      EXPECT_EQ(static_cast<double>(b.bytes), cublas_workspace_bytes(gpu)) << id;
    }
    EXPECT_EQ(counted, 1) << id;
  }
}

}  // namespace
}  // namespace trainfit::detail
