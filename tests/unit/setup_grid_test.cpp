// A SetupGroup prices each (batch, accumulation, checkpointing) exactly as estimate_memory, judge
// and estimate_time price the whole setup: over random setups of every axis the advisor searches,
// and because what the group counts once does not depend on what its points change.
#include "plan/setup_grid.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "memory/memory_model.hpp"
#include "step/step.hpp"
#include "time/time_model.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}

bool chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

std::int64_t between(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// The axes `trainfit advise` searches, and more: every built-in model, every catalogue card and
// one known by its memory only (no time), methods, dtypes, adapters, optimizers, sequence
// lengths, checkpointing, attention kernels, data parallelism, platforms and headroom.
struct Universe {
  std::vector<ModelSpec> models;
  std::vector<GpuSpec> gpus;
  Universe() {
    for (const auto& name : builtin_model_names()) models.push_back(load_model(name));
    gpus = gpu_catalog();
    gpus.push_back(gpu_with_vram(24 * kGiB));
  }
};

const Universe& universe() {
  static const Universe u;
  return u;
}

struct Case {
  const ModelSpec* model = nullptr;
  const GpuSpec* gpu = nullptr;
  TrainingSetup setup;
  TimeProfile profile;
};

Case random_case(std::mt19937_64& rng) {
  const Universe& u = universe();
  Case c;
  c.model = &pick(rng, u.models);
  c.gpu = &pick(rng, u.gpus);
  TrainingSetup& s = c.setup;
  s.model = c.model->name;
  s.method = pick(rng, std::vector<Method>{Method::full, Method::lora, Method::qlora});
  if (s.method == Method::full) {
    s.weights = pick(rng, std::vector<DType>{DType::bf16, DType::fp16, DType::fp32});
    if (s.weights == DType::fp32 && chance(rng, 0.5)) s.amp = pick(rng, std::vector<DType>{DType::bf16, DType::fp16});
  } else if (s.method == Method::lora) {
    s.weights = pick(rng, std::vector<DType>{DType::bf16, DType::fp16, DType::fp32});
  } else {
    s.weights = pick(rng, std::vector<DType>{DType::nf4, DType::fp4, DType::int8});
    s.quant.kbit_prepare = chance(rng, 0.3);
    s.quant.double_quant = chance(rng, 0.8);
    s.quant.compute_dtype = pick(rng, std::vector<DType>{DType::bf16, DType::fp16, DType::fp32});
  }
  s.lora.rank = pick(rng, std::vector<std::int64_t>{4, 8, 16, 64, 256});
  s.lora.targets = pick(rng, std::vector<std::vector<std::string>>{{"all-linear"},
                                                                   {"q_proj", "v_proj"},
                                                                   {"q_proj", "k_proj", "v_proj", "o_proj"},
                                                                   {"gate_proj", "up_proj", "down_proj"},
                                                                   {"o_proj"}});
  if (chance(rng, 0.2)) s.lora.dropout = 0;
  if (chance(rng, 0.15)) s.lora.adapter_dtype = pick(rng, std::vector<DType>{DType::bf16, DType::fp16});
  s.optimizer = pick(rng, std::vector<Optimizer>{Optimizer::adamw, Optimizer::adamw_8bit, Optimizer::sgd,
                                                 Optimizer::sgd_momentum, Optimizer::adafactor});
  s.seq = pick(rng, std::vector<std::int64_t>{128, 256, 512, 1000, 2048, 4096, 8192, 32768});
  s.batch = between(rng, 1, 64);
  s.grad_accum = pick(rng, std::vector<std::int64_t>{1, 2, 3, 4, 8, 16});
  s.grad_ckpt = chance(rng, 0.5);
  s.attention = pick(rng, std::vector<Attention>{Attention::sdpa, Attention::eager, Attention::flash});
  s.gpus = pick(rng, std::vector<std::int64_t>{1, 1, 2, 8});
  s.parallel = pick(rng, std::vector<Parallel>{Parallel::ddp, Parallel::fsdp});
  s.platform = chance(rng, 0.25) ? Platform::on_windows : Platform::on_linux;
  // The objectives whose rules do not depend on the micro-batch (kto's and grpo's do: their own
  // test, below), with any reference (the ones an objective refuses are refused by both).
  if (chance(rng, 0.25)) {
    s.objective = pick(rng, std::vector<Objective>{Objective::dpo, Objective::orpo, Objective::reward, Objective::ppo});
    s.reference = pick(rng, std::vector<Reference>{Reference::copy, Reference::adapter_off, Reference::precomputed,
                                                   Reference::none});
    s.completion_len = between(rng, 1, s.seq - 1);
  }
  s.headroom = pick(rng, std::vector<double>{0.2, 0.05, 0.5});
  c.profile = default_profile(*c.gpu);
  if (chance(rng, 0.3)) {  // a calibrated profile: the group must price with the one it was given
    c.profile.host_seconds_per_op *= 1.7;
    c.profile.bandwidth_efficiency *= 0.8;
  }
  return c;
}

std::string describe(const Case& c, const TrainingSetup& s) {
  return c.model->name + " on " + c.gpu->id + ": " + setup_label(s);
}

// The point against the whole-setup functions: identical bytes and verdict, the same step time.
void expect_point_is_the_estimate(const Case& c, const TrainingSetup& s, const SetupGroup::Point& p) {
  SCOPED_TRACE(describe(c, s));
  const MemoryEstimate memory = estimate_memory(*c.model, s, *c.gpu);
  EXPECT_EQ(p.peak_allocated_bytes, memory.peak_allocated_bytes);
  EXPECT_EQ(p.device_used_bytes, memory.device_used_bytes);
  EXPECT_EQ(p.busiest_peak_allocated_bytes, memory.busiest_peak_allocated_bytes);
  EXPECT_EQ(p.busiest_device_used_bytes, memory.busiest_device_used_bytes);
  // Judged on the busiest GPU, as make_plan judges: its device use, or what a later step needs
  // when the first optimizer step strands the first step's logits segment.
  const std::int64_t later = detail::later_step_need_bytes(
      memory.busiest_peak_allocated_bytes, memory.later_logits_segment_bytes, memory.cuda_context_bytes);
  const Verdict verdict = judge(memory.busiest_peak_allocated_bytes, std::max(memory.busiest_device_used_bytes, later),
                                c.gpu->memory_bytes, s.headroom, s.platform);
  EXPECT_EQ(p.verdict, verdict);
  const TimeEstimate time = estimate_time(*c.model, s, *c.gpu, c.profile, verdict == Verdict::spills);
  if (time.predicted) {
    EXPECT_NEAR(p.step_seconds, time.step_seconds, 1e-9 * time.step_seconds);
    EXPECT_NEAR(p.tokens_per_second, time.tokens_per_second, 1e-9 * time.tokens_per_second);
  } else {
    EXPECT_EQ(p.step_seconds, 0.0);
    EXPECT_EQ(p.tokens_per_second, 0.0);
  }
}

TEST(SetupGroup, EveryPointIsTheEstimateOfItsSetup) {
  std::mt19937_64 rng(20261130);
  int compared = 0, refused = 0, spilled = 0, untimed = 0;
  for (int i = 0; i < 20000 && compared < 3000; ++i) {
    const Case c = random_case(rng);
    // Whether the whole setup plans, as estimate_memory decides it.
    bool valid = true;
    try {
      (void)estimate_memory(*c.model, c.setup, *c.gpu);
    } catch (const InputError&) {
      valid = false;
    }
    std::optional<SetupGroup> group;
    try {
      group.emplace(*c.model, c.setup, *c.gpu, c.profile);
    } catch (const InputError&) {
      EXPECT_FALSE(valid) << describe(c, c.setup);  // the group refuses only what estimate_memory refuses
      ++refused;
      continue;
    }
    if (!valid) {  // refused for its batch alone: at() refuses it too
      EXPECT_THROW((void)group->at(c.setup.batch, c.setup.grad_accum), SettingError) << describe(c, c.setup);
      ++refused;
      continue;
    }
    const SetupGroup::Point p = group->at(c.setup.batch, c.setup.grad_accum);
    expect_point_is_the_estimate(c, c.setup, p);
    ++compared;
    spilled += p.verdict == Verdict::spills ? 1 : 0;
    untimed += p.step_seconds == 0 ? 1 : 0;
    // More points of the same group, checkpointing flipped too (the three-argument at()).
    for (int k = 0; k < 2; ++k) {
      TrainingSetup s = c.setup;
      s.batch = between(rng, 1, std::min<std::int64_t>(64, kMaxMicroBatchTokens / s.seq));
      s.grad_accum = between(rng, 1, 32);
      s.grad_ckpt = chance(rng, 0.5);
      expect_point_is_the_estimate(c, s, group->at(s.batch, s.grad_accum, s.grad_ckpt));
      ++compared;
    }
  }
  EXPECT_GE(compared, 3000);
  EXPECT_GT(refused, 0);  // the axes include setups trainfit refuses
  EXPECT_GT(spilled, 0);  // and steps timed with their spill
  EXPECT_GT(untimed, 0);  // and a card without rates
}

// KTO's batch of two and GRPO's whole groups depend on the micro-batch and accumulation: the
// group refuses each point estimate_memory refuses, and prices the others as it does.
TEST(SetupGroup, ObjectivesWithRulesOnTheBatchAreCheckedAtEveryPoint) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec gpu = find_gpu("h200");
  const TimeProfile profile = default_profile(gpu);
  for (const Objective o : {Objective::kto, Objective::grpo}) {
    TrainingSetup s;
    s.model = model.name;
    s.objective = o;
    s.reference = default_reference(o, s.method);
    s.generations = 4;
    s.batch = 4;
    const SetupGroup group(model, s, gpu, profile);
    for (const std::int64_t batch : {1, 2, 3, 4}) {
      for (const std::int64_t accum : {1, 2, 4}) {
        TrainingSetup point = s;
        point.batch = batch;
        point.grad_accum = accum;
        bool valid = true;
        try {
          validate(point);
        } catch (const SettingError&) {
          valid = false;
        }
        SCOPED_TRACE(setup_label(point));
        if (!valid) {
          EXPECT_THROW((void)group.at(batch, accum), SettingError);
          continue;
        }
        const SetupGroup::Point p = group.at(batch, accum);
        EXPECT_EQ(p.peak_allocated_bytes, estimate_memory(model, point, gpu).peak_allocated_bytes);
        EXPECT_NEAR(p.step_seconds, estimate_time(model, point, gpu, profile, false).step_seconds, 1e-12);
      }
    }
  }
}

// The split the group relies on: describe_step, memory_basis and work_basis read neither the
// batch (describe_step's `tokens` aside) nor the accumulation nor checkpointing.
TEST(SetupGroup, DescribeStepDoesNotDependOnBatchAccumulationOrCheckpointing) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int i = 0; i < 5000 && checked < 300; ++i) {
    const Case c = random_case(rng);
    TrainingSetup other = c.setup;
    other.batch = c.setup.batch % 7 + 1;
    other.grad_accum = c.setup.grad_accum + 5;
    other.grad_ckpt = !c.setup.grad_ckpt;
    try {
      validate(c.setup);
      validate(other);
      Step a = describe_step(*c.model, c.setup);
      const Step b = describe_step(*c.model, other);
      SCOPED_TRACE(describe(c, c.setup));
      EXPECT_EQ(a.tokens(), micro_batch_tokens(c.setup.seq, c.setup.batch));
      EXPECT_EQ(b.tokens(), micro_batch_tokens(other.seq, other.batch));
      a.tensors.tokens = b.tensors.tokens;
      EXPECT_TRUE(a.tensors == b.tensors);
      EXPECT_TRUE(memory_basis(*c.model, a, *c.gpu) == memory_basis(*c.model, b, *c.gpu));
      EXPECT_TRUE(work_basis(*c.model, a) == work_basis(*c.model, b));
      ++checked;
    } catch (const InputError&) {
      // an invalid setup has no step to describe
    }
  }
  EXPECT_GE(checked, 300);
}

TEST(SetupGroup, RefusesWhatEstimateMemoryRefuses) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h200");
  const TimeProfile profile = default_profile(gpu);
  TrainingSetup s;
  s.seq = 8192;
  const SetupGroup group(model, s, gpu, profile);
  // The batch and accumulation out of the settings' ranges, and a micro-batch of too many tokens:
  // the same error, word for word.
  for (const auto& [batch, accum] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 1}, {-3, 1}, {65537, 1}, {1, 0}, {1, 1000001}, {2049, 1}}) {
    TrainingSetup bad = s;
    bad.batch = batch;
    bad.grad_accum = accum;
    std::string expected;
    try {
      (void)estimate_memory(model, bad, gpu);
    } catch (const SettingError& e) {
      expected = e.what();
    }
    ASSERT_FALSE(expected.empty()) << batch << " x " << accum;
    try {
      (void)group.at(batch, accum);
      ADD_FAILURE() << batch << " x " << accum << " was priced";
    } catch (const SettingError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  // The largest batch at this sequence length is priced.
  EXPECT_GT(group.at(2048, 1000000).peak_allocated_bytes, 0);

  // An invalid base: refused when the group is made, as estimate_memory refuses it.
  TrainingSetup qlora_bf16;
  qlora_bf16.method = Method::qlora;
  EXPECT_THROW(SetupGroup(model, qlora_bf16, gpu, profile), SettingError);
  TrainingSetup fused;
  fused.lora.targets = {"q_proj"};
  EXPECT_THROW(SetupGroup(load_model("phi3-mini"), fused, gpu, profile), SettingError);
}

}  // namespace
}  // namespace trainfit::detail
