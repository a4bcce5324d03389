// The training objectives (docs/model.md, "Objectives"): each term against the SFT step it
// extends, the models beside the policy, the defaults and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "memory/memory_model.hpp"
#include "step/step.hpp"
#include "support/memory_checks.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using detail::allocator_block;

constexpr double kQwenVocab = 151936;  // qwen2.5's vocabulary (data/models/qwen2.5-1.5b.json)

std::map<std::string, std::int64_t> breakdown(const MemoryEstimate& e) {
  std::map<std::string, std::int64_t> m;
  for (const auto& t : e.breakdown) m[t.category] = t.bytes;
  return m;
}

TrainingSetup setup(Objective objective, Method method, std::int64_t batch = 2) {
  TrainingSetup s;
  s.model = "qwen2.5-1.5b";
  s.objective = objective;
  s.method = method;
  s.weights = method == Method::qlora ? DType::nf4 : DType::bf16;
  s.reference = default_reference(objective, method);
  s.seq = 1024;
  s.batch = batch;
  s.completion_len = 512;
  return s;
}

MemoryEstimate estimate(const TrainingSetup& s, const std::string& model = "qwen2.5-1.5b") {
  return estimate_memory(load_model(model), s, find_gpu("h200"));
}

// Every moment of the step, as the memory model prices them.
detail::StepMemory moments(const TrainingSetup& s, const std::string& model = "qwen2.5-1.5b") {
  const ModelSpec m = load_model(model);
  const detail::Step step = detail::describe_step(m, s);
  const detail::MemoryBasis b = detail::memory_basis(m, step, find_gpu("h200"));
  return detail::step_memory(b, step.tokens(), s.grad_accum, s.grad_ckpt);
}

const detail::MemoryMoment& moment(const detail::StepMemory& sm, std::string_view what) {
  for (std::size_t i = 0; i < sm.count; ++i)
    if (std::string_view(sm.moments[i].what).starts_with(what)) return sm.moments[i];
  ADD_FAILURE() << "no moment " << what;
  return sm.moments[0];
}

bool has_moment(const detail::StepMemory& sm, std::string_view what) {
  for (std::size_t i = 0; i < sm.count; ++i)
    if (std::string_view(sm.moments[i].what).starts_with(what)) return true;
  return false;
}

// TRL's logits-sized tensors, restated from docs/model.md ("Objectives") for n sequences of
// bf16 logits: full(k) the logits of k sequences (P positions), a row one sequence's log-softmax
// (R positions), cat(k) k rows in one tensor, the entropy's chunk of 128 rows.
struct Logits {
  double n, P, R, V = kQwenVocab, c = 2;
  double full(double k) const { return allocator_block(k * P * V * c); }
  double row() const { return allocator_block(R * V * c); }
  double cat(double k) const { return allocator_block(k * R * V * c); }
  double chunk() const { return 3.0 * allocator_block(128.0 * V * c); }
};

TEST(Objective, DpoUnderFullFineTuningIsSftAtTwiceTheSequencesPlusAFrozenCopy) {
  const TrainingSetup sft = setup(Objective::sft, Method::full, 4);
  const TrainingSetup dpo = setup(Objective::dpo, Method::full, 2);
  ASSERT_EQ(dpo.reference, Reference::copy);
  const auto a = breakdown(estimate(sft)), b = breakdown(estimate(dpo));
  EXPECT_EQ(b.at("weights"), a.at("weights"));
  EXPECT_EQ(b.at("optimizer_states"), a.at("optimizer_states"));
  // The frozen copy is the policy's bf16 weights, block for block.
  EXPECT_EQ(b.at("reference_weights"), a.at("weights"));
  EXPECT_FALSE(a.contains("reference_weights"));  // sft's breakdown is what it was

  // At the loss's forward: the same saved activations as sft at 4 sequences; the logits are the
  // policy's, its rows, the reference's logits and the entropy's copy and chunk.
  const auto ms = moments(sft), md = moments(dpo);
  const auto& f_sft = moment(ms, "cross-entropy forward");
  const auto& f_dpo = moment(md, "loss forward");
  EXPECT_EQ(f_dpo.activations, f_sft.activations);
  const Logits l{4, 1024, 1023};
  EXPECT_DOUBLE_EQ(f_dpo.logits_and_loss, l.full(4) + 4 * l.row() + l.full(4) + l.cat(4) + l.chunk());
  // The reference forward: the policy's logits and rows alive, one layer's no-grad intermediates.
  const auto& r = moment(md, "reference forward");
  EXPECT_DOUBLE_EQ(r.logits_and_loss, l.full(4) + 4 * l.row());
  EXPECT_EQ(r.activations, f_sft.activations);
  // The backward: the rows' gradients stacked, then written into zeros of the logits' shape.
  EXPECT_DOUBLE_EQ(moment(md, "log-softmax backward").logits_and_loss, l.cat(4) + std::max(4 * l.row(), l.full(4)));
  EXPECT_DOUBLE_EQ(moment(md, "output layer backward").logits_and_loss, l.full(4));

  const MemoryEstimate e = estimate(dpo);
  EXPECT_EQ(e.objective.trained_sequences, 4);
  EXPECT_EQ(e.objective.no_grad_sequences, 4);
  EXPECT_EQ(e.objective.reference_weights_bytes, b.at("reference_weights"));
}

TEST(Objective, LoraDpoAddsNoWeightsAndPrecomputedAddsNoReferenceForward) {
  const TrainingSetup dpo = setup(Objective::dpo, Method::lora);
  ASSERT_EQ(dpo.reference, Reference::adapter_off);
  const auto d = breakdown(estimate(dpo)), s = breakdown(estimate(setup(Objective::sft, Method::lora, 4)));
  EXPECT_EQ(d.at("reference_weights"), 0);
  EXPECT_EQ(d.at("weights"), s.at("weights"));
  EXPECT_EQ(d.at("adapters"), s.at("adapters"));
  EXPECT_EQ(d.at("optimizer_states"), s.at("optimizer_states"));

  TrainingSetup pre = dpo;
  pre.reference = Reference::precomputed;
  const auto off = moments(dpo), precomputed = moments(pre);
  EXPECT_TRUE(has_moment(off, "reference forward"));
  EXPECT_FALSE(has_moment(precomputed, "reference forward"));
  const Logits l{4, 1024, 1023};
  EXPECT_DOUBLE_EQ(moment(off, "loss forward").logits_and_loss - moment(precomputed, "loss forward").logits_and_loss,
                   l.full(4));
  EXPECT_EQ(estimate(pre).objective.no_grad_sequences, 0);
}

TEST(Objective, AQuantisedCopyIsStoredAsThePolicysBase) {
  TrainingSetup s = setup(Objective::dpo, Method::qlora);
  s.reference = Reference::copy;
  const auto b = breakdown(estimate(s));
  EXPECT_EQ(b.at("reference_weights"), b.at("weights") + b.at("quant_constants"));
}

TEST(Objective, TheRewardModelHasAScoreHeadAndNoVocabularyLogits) {
  // qwen2.5-7b's output layer is its own (untied): the classifier drops it for hidden x 1.
  const ModelSpec m = load_model("qwen2.5-7b");
  const ParameterCounts pc = count_parameters(m);
  ASSERT_GT(pc.lm_head, 0);
  TrainingSetup reward = setup(Objective::reward, Method::full);
  reward.model = "qwen2.5-7b";
  TrainingSetup sft = setup(Objective::sft, Method::full, 4);
  sft.model = "qwen2.5-7b";
  const MemoryEstimate r = estimate(reward, "qwen2.5-7b"), s = estimate(sft, "qwen2.5-7b");
  EXPECT_EQ(r.trainable_parameters, pc.total - pc.lm_head + m.hidden_size);
  const auto rb = breakdown(r), sb = breakdown(s);
  EXPECT_NEAR(static_cast<double>(sb.at("weights") - rb.at("weights")), 2.0 * static_cast<double>(pc.lm_head),
              2.0 * static_cast<double>(kMiB));  // the output layer's bf16 bytes, up to its block's rounding
  EXPECT_LT(rb.at("logits_and_loss"), kMiB);     // one score per position: 8 sequences x 1024 x 2 bytes
  EXPECT_EQ(r.objective.trained_sequences, 4);
  EXPECT_FALSE(rb.contains("reference_weights"));  // a reward model has no reference
}

TEST(Objective, PpoTrainsAValueModelBesideThePolicyAndHoldsAFrozenRewardModel) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const ParameterCounts pc = count_parameters(m);
  const TrainingSetup lora = setup(Objective::ppo, Method::lora);
  const MemoryEstimate e = estimate(lora);
  const auto b = breakdown(e);
  EXPECT_EQ(b.at("value_weights"), b.at("reward_weights"));
  EXPECT_EQ(b.at("reference_weights"), 0);  // adapter-off under LoRA
  // The value model trains every weight though the policy is LoRA (TRL applies PEFT to the policy).
  const std::int64_t value_params = pc.total - pc.lm_head + m.hidden_size;
  EXPECT_EQ(e.objective.value_parameters, value_params);
  const MemoryEstimate sft = estimate(setup(Objective::sft, Method::lora));
  EXPECT_EQ(e.trainable_parameters, sft.trainable_parameters + value_params);
  // AdamW's two bf16 states of every value parameter join the adapters' fp32 ones.
  EXPECT_GE(b.at("optimizer_states"), breakdown(sft).at("optimizer_states") + 4 * value_params);
  EXPECT_NEAR(static_cast<double>(e.objective.value_optimizer_states_bytes),
              static_cast<double>(b.at("optimizer_states") - breakdown(sft).at("optimizer_states")), 2.0);
  // TRL keeps the policy's logits to the step's end: they are alive at the optimizer step.
  const auto sm = moments(lora);
  const Logits l{2, 1024, 512};
  EXPECT_DOUBLE_EQ(moment(sm, "optimizer step").logits_and_loss, l.full(2));
  EXPECT_TRUE(has_moment(sm, "value model backward"));
  // Under full fine-tuning the reference is a frozen copy too: three models' weights beside the policy.
  const auto full = breakdown(estimate(setup(Objective::ppo, Method::full)));
  EXPECT_EQ(full.at("reference_weights"), full.at("weights"));
}

TEST(Objective, GrpoComputesLogitsForTheCompletionOnly) {
  TrainingSetup s = setup(Objective::grpo, Method::lora);
  s.generations = 2;
  ASSERT_EQ(s.reference, Reference::none);
  for (const std::int64_t completion : {256, 512, 1000}) {
    s.completion_len = completion;
    const Logits l{2, static_cast<double>(completion + 1), static_cast<double>(completion)};
    const auto sm = moments(s);
    EXPECT_DOUBLE_EQ(moment(sm, "loss forward").logits_and_loss, l.full(2) + 2 * l.row() + l.cat(2) + l.chunk())
        << completion;
    EXPECT_DOUBLE_EQ(moment(sm, "log-softmax backward").logits_and_loss,
                     std::max(2 * l.row() + l.cat(2), 2 * l.full(2) + 2 * l.cat(2)));
  }
  // With a reference (beta > 0) its forward runs in the scoring phase: time, not the step's memory.
  TrainingSetup with_reference = s;
  with_reference.reference = Reference::adapter_off;
  EXPECT_EQ(estimate(with_reference).peak_allocated_bytes, estimate(s).peak_allocated_bytes);
  EXPECT_EQ(estimate(with_reference).objective.no_grad_sequences, 2);
  const GpuSpec h200 = find_gpu("h200");
  const ModelSpec m = load_model("qwen2.5-1.5b");
  EXPECT_GT(estimate_time(m, with_reference, h200, default_profile(h200), false).step_seconds,
            estimate_time(m, s, h200, default_profile(h200), false).step_seconds);
}

TEST(Objective, KtoRunsItsKlBatchAndTheReferenceWithoutGradients) {
  const MemoryEstimate e = estimate(setup(Objective::kto, Method::full, 4));
  EXPECT_EQ(e.objective.trained_sequences, 4);
  EXPECT_EQ(e.objective.no_grad_sequences, 12);  // the KL batch through the policy; both through the reference
  // The metrics' copies of the desirable and undesirable logits outgrow the entropy's.
  const Logits l{4, 1024, 1023};
  const auto sm = moments(setup(Objective::kto, Method::full, 4));
  EXPECT_DOUBLE_EQ(moment(sm, "loss forward").logits_and_loss,
                   l.full(4) + 4 * l.row() + l.full(4) + std::max(l.cat(4) + l.chunk(), 2 * l.cat(2) + l.cat(2)));
}

TEST(Objective, StepTimeAddsTheReferenceForwardAndCountsTrainedTokens) {
  const GpuSpec h200 = find_gpu("h200");
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const TimeProfile prof = default_profile(h200);
  const TrainingSetup dpo = setup(Objective::dpo, Method::full, 2);
  TrainingSetup pre = dpo;
  pre.reference = Reference::precomputed;
  const TimeEstimate with_ref = estimate_time(m, dpo, h200, prof, false);
  const TimeEstimate without = estimate_time(m, pre, h200, prof, false);
  EXPECT_GT(with_ref.step_seconds, without.step_seconds);
  // 2 examples, chosen and rejected: 4 x 1024 trained tokens a step.
  EXPECT_NEAR(with_ref.tokens_per_second * with_ref.step_seconds, 4.0 * 1024, 1e-6);
  const StepWork w_dpo = step_work(m, dpo), w_pre = step_work(m, pre),
                 w_sft = step_work(m, setup(Objective::sft, Method::full, 4));
  // The reference forward is forward FLOPs only: a third of the policy's matmuls (forward, input and
  // weight gradients) over the same tokens.
  EXPECT_NEAR(w_dpo.tensor_flops - w_pre.tensor_flops, w_sft.tensor_flops / 3.0, 1e-9 * w_sft.tensor_flops);
  EXPECT_EQ(w_pre.tensor_flops, w_sft.tensor_flops);
}

// GRPO's generation (docs/model.md, "Generation"): generate() calls in series with the micro-
// batches, each a prefill and completion - 1 decoding steps that take the longer of the host's
// dispatch and the GPU's work.
TEST(Objective, GrpoGenerationRunsInSeriesOnceAGenerationBatch) {
  const GpuSpec h100 = find_gpu("h100-sxm");
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const TimeProfile prof = default_profile(h100);
  TrainingSetup off = setup(Objective::grpo, Method::lora, 8);
  off.generations = 4;
  TrainingSetup on = off;
  on.generation = Generation::generate;
  const TimeEstimate a = estimate_time(m, off, h100, prof, false), b = estimate_time(m, on, h100, prof, false);
  EXPECT_EQ(a.generation_seconds, 0.0);
  ASSERT_GT(b.generation_seconds, 0.0);
  EXPECT_NEAR(b.step_seconds - a.step_seconds, b.generation_seconds, 1e-12);
  double path = 0;
  for (const TimeTerm& t : b.critical_path) path += t.seconds;
  EXPECT_NEAR(path, b.step_seconds, 1e-9 * b.step_seconds);
  // Eight rows of a 1.5B model decode far faster on the GPU than the host dispatches a step: each
  // decoding step is the host's, whatever the context, so the 511 decoding steps take about
  // 511 x (operations x decode_seconds_per_op + branches x decode_adapter_seconds + decode_loop_seconds).
  const GenerationWork g = step_work(m, on).generation;
  EXPECT_EQ(g.adapters, 7.0 * 28);  // the default targets, all-linear, in 28 layers
  const double host =
      g.layer_ops * prof.decode_seconds_per_op + g.adapters * prof.decode_adapter_seconds + prof.decode_loop_seconds;
  EXPECT_NEAR(b.generation_seconds, 512.0 * host, 0.02 * b.generation_seconds);
  EXPECT_EQ(b.bottleneck, Bottleneck::launch_overhead);

  // A generation serves steps_per_generation micro-batches (grad_accum by default): with two
  // micro-batches a step it makes twice the rows once, about the same host time; one generation a
  // micro-batch runs it twice.
  TrainingSetup accum = on;
  accum.grad_accum = 2;
  const double once = estimate_time(m, accum, h100, prof, false).generation_seconds;
  EXPECT_NEAR(once, b.generation_seconds, 0.02 * once);
  accum.steps_per_generation = 1;
  EXPECT_NEAR(estimate_time(m, accum, h100, prof, false).generation_seconds, 2.0 * b.generation_seconds,
              1e-9 * b.generation_seconds);
  // num_iterations 2: one generation every other step, plus a forward without gradients over the
  // generation batch for the old policy's log-probabilities.
  TrainingSetup twice = on;
  twice.iterations = 2;
  const double amortised = estimate_time(m, twice, h100, prof, false).generation_seconds;
  EXPECT_GT(amortised, 0.5 * b.generation_seconds);
  EXPECT_LT(amortised, 0.55 * b.generation_seconds);
  // The completion sets the number of decoding steps.
  TrainingSetup longer = on;
  longer.seq = 2048;
  longer.completion_len = 1024;
  EXPECT_NEAR(estimate_time(m, longer, h100, prof, false).generation_seconds / b.generation_seconds, 1023.0 / 511.0,
              0.03);
}

// Generation's memory: the dynamic cache of every row of a generation batch at its longest (a
// keys and a values tensor per layer), no saved activations.
TEST(Objective, GrpoGenerationHoldsTheKvCacheOfTheGenerationBatch) {
  TrainingSetup s = setup(Objective::grpo, Method::lora, 2);  // 512 prompt + 512 completion tokens
  s.generations = 8;
  s.grad_accum = 32;  // one generation serves the step: 64 rows
  s.generation = Generation::generate;
  const detail::StepMemory with = moments(s);
  const detail::MemoryMoment* gen = nullptr;
  for (std::size_t i = 0; i < with.count; ++i)
    if (std::string(with.moments[i].what).rfind("generation", 0) == 0) gen = &with.moments[i];
  ASSERT_NE(gen, nullptr);
  // Qwen2.5-1.5B: 28 layers, 2 key/value heads of 128, bf16: 64 rows x 1024 positions x 512 bytes
  // a tensor, 56 tensors.
  const double tensor = allocator_block(64.0 * 1024 * 2 * 128 * 2);
  EXPECT_EQ(gen->activations, 56.0 * tensor);
  EXPECT_EQ(gen->transient, tensor);
  EXPECT_EQ(gen->gradients, 0.0);
  s.generation = Generation::none;
  EXPECT_EQ(moments(s).count + 1, with.count);
}

TEST(Objective, GrpoGeneratesUnderTrlsTrainerByDefault) {
  auto resolve = [](std::vector<GivenSetting> g) { return resolve_setup(g); };
  const Setting* objective = find_setting("objective");
  const Setting* trainer = find_setting("trainer");
  const Setting* batch = find_setting("batch");
  auto with = [&](const Setting* s, const char* v) { return GivenSetting{s, parse_setting_text(*s, v)}; };
  EXPECT_EQ(resolve({with(objective, "grpo"), with(trainer, "trl"), with(batch, "8")}).generation,
            Generation::generate);
  // trainfit's runner times the optimisation step alone.
  EXPECT_EQ(resolve({with(objective, "grpo"), with(batch, "8")}).generation, Generation::none);
  // steps_per_generation 0 follows grad_accum; the generation batch must hold whole groups.
  TrainingSetup s = setup(Objective::grpo, Method::lora, 4);
  s.generations = 8;
  s.grad_accum = 2;
  EXPECT_NO_THROW(validate(s));
  s.steps_per_generation = 1;
  EXPECT_THROW(validate(s), SettingError);
}

TEST(Objective, TheBreakdownSumsToThePeakForEveryObjective) {
  for (const Objective o : {Objective::sft, Objective::dpo, Objective::orpo, Objective::kto, Objective::reward,
                            Objective::ppo, Objective::grpo}) {
    for (const Method method : {Method::full, Method::lora, Method::qlora}) {
      for (const bool ckpt : {false, true}) {
        if (o == Objective::ppo && method == Method::qlora) continue;
        TrainingSetup s = setup(o, method);
        s.generations = 2;
        s.grad_ckpt = ckpt;
        SCOPED_TRACE(setup_label(s));
        const MemoryEstimate e = estimate(s);
        trainfit::testing::expect_breakdown_and_phases_make_the_peak(e);
      }
    }
  }
}

TEST(Objective, SftIgnoresTheObjectivesSettings) {
  const GpuSpec h200 = find_gpu("h200");
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const TrainingSetup plain = setup(Objective::sft, Method::full, 2);
  TrainingSetup other = plain;
  other.reference = Reference::precomputed;
  other.generations = 3;
  other.completion_len = 7;
  const MemoryEstimate a = estimate(plain), b = estimate(other);
  EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
  EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
  EXPECT_EQ(estimate_time(m, plain, h200, default_profile(h200), false).step_seconds,
            estimate_time(m, other, h200, default_profile(h200), false).step_seconds);
  EXPECT_EQ(setup_to_json(plain), setup_to_json(other));  // they do not apply, so they are not written
}

GivenSetting given(const char* key, const char* value) {
  const Setting* s = find_setting(key);
  return {s, parse_setting_text(*s, value)};
}

TEST(Objective, DefaultsFollowTrl) {
  auto resolve = [](std::vector<GivenSetting> g) { return resolve_setup(g); };
  EXPECT_EQ(resolve({given("objective", "dpo"), given("method", "full")}).reference, Reference::copy);
  EXPECT_EQ(resolve({given("objective", "dpo"), given("method", "lora")}).reference, Reference::adapter_off);
  EXPECT_EQ(resolve({given("objective", "kto"), given("method", "qlora"), given("batch", "2")}).reference,
            Reference::adapter_off);
  // GRPOConfig.beta is 0 by default: no reference, whatever the method.
  EXPECT_EQ(resolve({given("objective", "grpo"), given("method", "full"), given("batch", "8")}).reference,
            Reference::none);
  EXPECT_EQ(resolve({given("objective", "grpo"), given("batch", "8")}).generations, 8);
  // The completion is half the sequence, a half rounded up as the schema's readers round it.
  EXPECT_EQ(resolve({given("objective", "ppo"), given("seq", "1025")}).completion_len, 513);
}

TEST(Objective, RefusalsNameTheSettingAndTheReason) {
  struct Refused {
    TrainingSetup s;
    const char* key;
    const char* words;
  };
  std::vector<Refused> cases;
  {
    TrainingSetup s = setup(Objective::dpo, Method::full);
    s.reference = Reference::adapter_off;
    cases.push_back({s, "reference", "full fine-tuning has none"});
  }
  {
    TrainingSetup s = setup(Objective::grpo, Method::lora);
    s.reference = Reference::precomputed;
    cases.push_back({s, "reference", "cannot be computed before training"});
  }
  {
    TrainingSetup s = setup(Objective::dpo, Method::lora);
    s.reference = Reference::none;
    cases.push_back({s, "reference", "needs the reference"});
  }
  cases.push_back({setup(Objective::ppo, Method::qlora), "objective", "value model"});
  cases.push_back({setup(Objective::kto, Method::lora, 1), "batch", "at least 2"});
  cases.push_back({setup(Objective::grpo, Method::lora, 2), "generations", "whole groups of 8"});
  {
    TrainingSetup s = setup(Objective::ppo, Method::lora);
    s.completion_len = 1024;
    cases.push_back({s, "completion_len", "must leave a prompt"});
  }
  {
    TrainingSetup s = setup(Objective::dpo, Method::full);
    s.gpus = 2;
    s.parallel = Parallel::fsdp;
    cases.push_back({s, "objective", "fsdp is not modelled"});
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    try {
      validate(c.s);
      ADD_FAILURE() << "accepted";
    } catch (const SettingError& e) {
      EXPECT_EQ(e.setting(), c.key);
      EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos) << e.what();
    }
  }
  // What TRL runs is accepted: a copy under LoRA (passing ref_model), DDP with an objective.
  TrainingSetup copy = setup(Objective::dpo, Method::lora);
  copy.reference = Reference::copy;
  EXPECT_NO_THROW(validate(copy));
  TrainingSetup ddp = setup(Objective::dpo, Method::full);
  ddp.gpus = 2;
  EXPECT_NO_THROW(validate(ddp));
}

}  // namespace
}  // namespace trainfit
