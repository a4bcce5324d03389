// Properties of the time model that follow from the physics, independent of calibration.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

TimeEstimate time_of(const std::string& model, const TrainingSetup& s, const GpuSpec& g, bool spills = false) {
  const ModelSpec m = load_model(model);
  return estimate_time(m, s, g, default_profile(g), spills);
}

TEST(Time, WorkFollowsTheSetup) {
  const ModelSpec m = load_model("qwen2.5-7b");
  TrainingSetup lora;
  lora.seq = 2048;
  TrainingSetup full = lora;
  full.method = Method::full;
  // Full fine-tuning computes weight gradients too: forward + 2x backward = 3 forwards of matmuls.
  const double ratio = step_work(m, full).tensor_flops / step_work(m, lora).tensor_flops;
  EXPECT_NEAR(ratio, 1.5, 0.01);
  TrainingSetup ckpt = lora;
  ckpt.grad_ckpt = true;
  EXPECT_GT(step_work(m, ckpt).tensor_flops, step_work(m, lora).tensor_flops);
  EXPECT_GT(step_work(m, ckpt).ops, step_work(m, lora).ops);
  TrainingSetup eager = lora;
  eager.attention = Attention::eager;
  EXPECT_GT(step_work(m, eager).attention_flops, step_work(m, lora).attention_flops);
  // Six FLOPs per parameter and token, the usual rule, for full fine-tuning's matmuls.
  const double per_token = step_work(m, full).model_flops / 2048.0;
  EXPECT_NEAR(per_token / (6.0 * static_cast<double>(count_parameters(m).total)), 1.0, 0.1);
}

TEST(Time, FasterCardsAreFasterAndSpillsAreSlow) {
  TrainingSetup s;
  s.seq = 4096;
  s.batch = 4;
  const auto h200 = time_of("qwen2.5-7b", s, find_gpu("h200"));
  const auto a100 = time_of("qwen2.5-7b", s, find_gpu("a100-80gb"));
  EXPECT_LT(h200.step_seconds, a100.step_seconds);
  EXPECT_NEAR(h200.tokens_per_second * h200.step_seconds, 4096.0 * 4, 1e-6);
  const auto spilled = time_of("qwen2.5-7b", s, find_gpu("rtx-4090"), true);
  const auto fitting = time_of("qwen2.5-7b", s, find_gpu("rtx-4090"), false);
  EXPECT_GT(spilled.spill_slowdown, 10.0);
  EXPECT_EQ(spilled.bottleneck, Bottleneck::host_link_spill);
  EXPECT_NEAR(spilled.step_seconds / fitting.step_seconds, spilled.spill_slowdown, 1e-9);
  double sum = 0;
  for (const auto& t : h200.breakdown)
    if (t.name != "host_dispatch") sum += t.seconds;
  EXPECT_NEAR(sum, h200.gpu_seconds, 1e-9);  // the GPU terms add up to the GPU's time
}

// The critical path (docs/model.md, "The step"): the terms that set the step's length add up to it,
// and no term lies on it longer than the work it stands for. GPU-bound, host-bound, spilling,
// pipelined, ZeRO-1 with its after-step collectives, and offloading setups.
TEST(Time, TheCriticalPathAddsUpToTheStep) {
  TrainingSetup gpu_bound;
  gpu_bound.method = Method::full;
  gpu_bound.seq = 4096;
  gpu_bound.batch = 4;
  TrainingSetup host_bound;  // a 0.5B LoRA at seq 128: the host's dispatch is the longer
  host_bound.seq = 128;
  TrainingSetup piped = gpu_bound;
  piped.gpus = 4;
  piped.pp = 4;
  piped.microbatches = 8;
  TrainingSetup zero1 = gpu_bound;
  zero1.gpus = 2;
  zero1.parallel = Parallel::zero1;
  TrainingSetup offloaded = gpu_bound;
  offloaded.gpus = 8;
  offloaded.parallel = Parallel::zero3;
  offloaded.offload = Offload::optimizer;
  const std::vector<std::pair<std::string, TimeEstimate>> cases = {
      {"gpu-bound", time_of("qwen2.5-7b", gpu_bound, find_gpu("h200"))},
      {"host-bound", time_of("qwen2.5-0.5b", host_bound, find_gpu("h200"))},
      {"spill", time_of("qwen2.5-7b", gpu_bound, find_gpu("rtx-4090"), true)},
      {"pipeline", time_of("qwen2.5-7b", piped, find_gpu("h100-sxm"))},
      {"zero1", time_of("qwen2.5-7b", zero1, find_gpu("h100-sxm"))},
      {"offload", time_of("qwen2.5-7b", offloaded, find_gpu("h100-sxm"))},
  };
  for (const auto& [name, t] : cases) {
    SCOPED_TRACE(name);
    double on_path = 0;
    for (const auto& term : t.critical_path) {
      on_path += term.seconds;
      const auto all = std::find_if(t.breakdown.begin(), t.breakdown.end(),
                                    [&](const TimeTerm& b) { return b.name == term.name; });
      ASSERT_NE(all, t.breakdown.end()) << term.name;
      EXPECT_LE(term.seconds, all->seconds * (1 + 1e-12) + 1e-15) << term.name;
      EXPECT_GE(term.seconds, 0.0) << term.name;
    }
    EXPECT_NEAR(on_path, t.step_seconds, 1e-9 * t.step_seconds);
  }
  // Which side paces the step decides what lies on the path.
  const auto on = [](const TimeEstimate& t, std::string_view name) {
    for (const auto& term : t.critical_path)
      if (term.name == name) return term.seconds;
    return -1.0;
  };
  EXPECT_EQ(on(cases[0].second, "host_dispatch"), 0.0);
  EXPECT_GT(on(cases[0].second, "matmul"), 0.0);
  EXPECT_EQ(on(cases[1].second, "matmul"), 0.0);
  EXPECT_GT(on(cases[1].second, "host_dispatch"), 0.0);
  EXPECT_GT(on(cases[3].second, "pipeline_bubble"), 0.0);
}

TEST(Time, UnknownThroughputIsReportedNotGuessed) {
  TrainingSetup s;
  const auto t = time_of("qwen2.5-0.5b", s, gpu_with_vram(16 * kGiB));
  EXPECT_FALSE(t.predicted);
}

TEST(TimeProfile, RoundTripsAndRejectsBadFiles) {
  TimeProfile p = default_profile(find_gpu("h200"));
  p.host_seconds_per_op = 1.25e-5;
  const TimeProfile q = parse_profile(profile_to_toml(p), "test");
  EXPECT_DOUBLE_EQ(q.host_seconds_per_op, 1.25e-5);
  EXPECT_DOUBLE_EQ(q.matmul_efficiency, p.matmul_efficiency);
  EXPECT_EQ(q.measured_on, "h200");
  EXPECT_EQ(parse_profile("measured_on = \"rtx-4090\"\n", "t").measured_on, "rtx-4090");
  EXPECT_THROW(parse_profile("matmul_efficiency = 1.5\n", "t"), InputError);
  EXPECT_THROW(parse_profile("matmul_efficiency = -1\n", "t"), InputError);
  EXPECT_THROW(parse_profile("matmul_eficiency = 0.5\n", "t"), InputError);
  EXPECT_THROW(parse_profile("= broken", "t"), InputError);
  EXPECT_THROW(load_profile("/nonexistent/profile.toml"), InputError);
}

std::string profile_error(const std::string& text) {
  try {
    (void)parse_profile(text, "p.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(TimeProfile, ErrorsNameFileLineAndField) {
  EXPECT_EQ(profile_error("name = \"x\"\nmatmul_efficiency = 1.5\n"),
            "p.toml:2: matmul_efficiency: must be above 0 and at most 1 (got 1.5)");
  EXPECT_EQ(profile_error("host_seconds_per_op = 0\n"), "p.toml:1: host_seconds_per_op: must be above 0 and at most 1 (got 0)");
  EXPECT_EQ(profile_error("spill_efficiency = \"fast\"\n"),
            "p.toml:1: spill_efficiency: expected a number, got a string");
  EXPECT_EQ(profile_error("\nname = 5\n"), "p.toml:2: name: expected a string, got an integer");
  EXPECT_EQ(
      profile_error("matmul_eficiency = 0.5\n").rfind("p.toml:1: matmul_eficiency: unknown field (known: name, ", 0),
      0u);
  EXPECT_EQ(profile_error("a = 1\n= broken").rfind("p.toml:2: invalid TOML", 0), 0u);
  EXPECT_EQ(profile_error("fp32_efficiency = 1\n"), "(accepted)");  // an integer is a number, 1 the peak
  // Operations an element, not a fraction of a peak.
  EXPECT_EQ(profile_error("broadcast_ops_per_element = 0.5\n"),
            "p.toml:1: broadcast_ops_per_element: must be above 1 and at most 100000 (got 0.5)");
  EXPECT_EQ(profile_error("broadcast_ops_per_element = 167\n"), "(accepted)");
}

// Every rate of a profile, by name: comparing them all, a new rate cannot be left out unnoticed
// (a profile's size is its two names, the card it was measured on, and these).
std::vector<std::pair<const char*, double>> rates(const TimeProfile& p) {
  static_assert(sizeof(TimeProfile) == 3 * sizeof(std::string) + 16 * sizeof(double), "a rate was added: list it here");
  return {{"matmul_efficiency", p.matmul_efficiency},
          {"attention_efficiency", p.attention_efficiency},
          {"fp32_efficiency", p.fp32_efficiency},
          {"bandwidth_efficiency", p.bandwidth_efficiency},
          {"broadcast_ops_per_element", p.broadcast_ops_per_element},
          {"host_seconds_per_op", p.host_seconds_per_op},
          {"kernel_floor_seconds", p.kernel_floor_seconds},
          {"spill_efficiency", p.spill_efficiency},
          {"all_reduce_efficiency", p.all_reduce_efficiency},
          {"all_gather_efficiency", p.all_gather_efficiency},
          {"dtensor_seconds_per_op", p.dtensor_seconds_per_op},
          {"collective_launch_seconds", p.collective_launch_seconds},
          {"collective_latency_seconds", p.collective_latency_seconds},
          {"decode_seconds_per_op", p.decode_seconds_per_op},
          {"decode_adapter_seconds", p.decode_adapter_seconds},
          {"decode_loop_seconds", p.decode_loop_seconds}};
}

// A profile file that leaves rates out gets the shipped ones: the values default_profile() uses,
// not other numbers of their own (it once fell back to 30 us a dispatch and 0.88 of bandwidth).
TEST(TimeProfile, FieldsLeftOutAreTheShippedProfile) {
  const TimeProfile named = parse_profile("name = \"x\"", "t");
  const TimeProfile shipped = default_profile(find_gpu("h200"));
  EXPECT_EQ(named.name, "x");
  const auto got = rates(named);
  const auto want = rates(shipped);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].second, want[i].second) << got[i].first;
  // One rate given, the others still shipped.
  const auto one = rates(parse_profile("host_seconds_per_op = 2e-5", "t"));
  for (std::size_t i = 0; i < one.size(); ++i) {
    if (std::string_view(one[i].first) == "host_seconds_per_op") EXPECT_EQ(one[i].second, 2e-5);
    else EXPECT_EQ(one[i].second, want[i].second) << one[i].first;
  }
  EXPECT_EQ(shipped.name, "h200-hf-peft");
  EXPECT_NE(default_profile(find_gpu("rtx-4090")).source.find("used as is for rtx-4090"), std::string::npos);
}

TEST(TimeCalibration, RecoversAKnownHostCost) {
  // Steps generated by the model itself with a known host cost: the fit must find it again.
  TimeProfile truth = default_profile(find_gpu("h200"));
  truth.host_seconds_per_op = 21e-6;
  std::vector<TimedStep> steps;
  for (const char* model : {"qwen2.5-0.5b", "qwen2.5-1.5b", "llama3.2-1b"}) {
    for (const std::int64_t seq : {512, 2048}) {
      TrainingSetup s;
      s.seq = seq;
      const ModelSpec m = load_model(model);
      const GpuSpec& g = find_gpu("h200");
      steps.push_back({m, s, g, estimate_time(m, s, g, truth, false).step_seconds});
    }
  }
  const auto r = calibrate(steps, default_profile(find_gpu("h200")), {"host_seconds_per_op"});
  EXPECT_NEAR(r.profile.host_seconds_per_op, 21e-6, 0.2e-6);
  EXPECT_LT(r.max_abs_error, 0.01);
  EXPECT_THROW(calibrate(steps, truth, {"no_such_parameter"}), InputError);
}

// Steps the model cannot explain at any rate a profile may hold (step times in microseconds read
// as seconds: host_seconds_per_op fits to 32.7 s) are refused, naming the parameter, instead of
// written as a profile that `plan --profile` then refuses.
TEST(TimeCalibration, AFitOutsideTheProfileRangeIsRefused) {
  const TimeProfile shipped = default_profile(find_gpu("h200"));
  std::vector<TimedStep> steps;
  for (const char* model : {"qwen2.5-0.5b", "qwen2.5-1.5b", "llama3.2-1b"}) {
    for (const std::int64_t seq : {512, 2048}) {
      TrainingSetup s;
      s.seq = seq;
      const ModelSpec m = load_model(model);
      const GpuSpec& g = find_gpu("h200");
      steps.push_back({m, s, g, 1e6 * estimate_time(m, s, g, shipped, false).step_seconds});
    }
  }
  try {
    (void)calibrate(steps, shipped);
    ADD_FAILURE() << "a fit of host_seconds_per_op above 1 s was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("calibrate: the fitted host_seconds_per_op is ", 0), 0u) << what;
    EXPECT_NE(what.find("outside (0, 1], the range a profile holds"), std::string::npos) << what;
    EXPECT_NE(what.find("are they in seconds?"), std::string::npos) << what;
  }
  // The same steps in seconds fit.
  for (auto& s : steps) s.step_seconds /= 1e6;
  EXPECT_NO_THROW((void)calibrate(steps, shipped));
  EXPECT_EQ(kProfileRateAbove, 0.0);  // the range parse_profile applies (TimeProfile.ErrorsNameFileLineAndField)
  EXPECT_EQ(kProfileRateAtMost, 1.0);
}

// Calibration prices each step's work, counted once, at every profile it tries: the price of a
// counted work is the estimate's, to the bit, so the fit does not move.
TEST(TimeCalibration, PricingACountedWorkIsTheEstimate) {
  for (const char* model : {"qwen2.5-0.5b", "qwen2.5-7b", "mixtral-8x7b"}) {
    TrainingSetup s;
    s.seq = 1024;
    s.gpus = 2;
    const ModelSpec m = load_model(model);
    const GpuSpec& g = find_gpu("h200");
    TimeProfile p = default_profile(g);
    p.host_seconds_per_op = 21e-6;
    const StepWork w = step_work(m, s);
    for (const bool spills : {false, true}) {
      const TimeEstimate a = estimate_time(m, s, g, p, spills), b = estimate_time(w, s, g, p, spills);
      EXPECT_EQ(a.step_seconds, b.step_seconds) << model;
      EXPECT_EQ(a.gpu_seconds, b.gpu_seconds) << model;
      EXPECT_EQ(a.host_seconds, b.host_seconds) << model;
      EXPECT_EQ(a.bottleneck, b.bottleneck) << model;
    }
  }
  EXPECT_FALSE(estimate_time(step_work(load_model("qwen2.5-0.5b"), TrainingSetup{}), TrainingSetup{}, gpu_with_vram(16 * kGiB),
                             default_profile(GpuSpec{}), false)
                   .predicted);
}

// Collectives: nothing on one GPU; DDP all-reduces 2 (n-1)/n of the trainable gradients and FSDP
// gathers the layers twice; a slow link makes the step communication-bound.
TEST(TimeDataParallel, CollectivesFollowTheLinkAndTheParallelism) {
  const ModelSpec m = load_model("qwen2.5-7b");
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  EXPECT_EQ(step_work(m, s).layout.all_reduce_bytes, 0.0);
  s.gpus = 2;
  const StepWork ddp = step_work(m, s);
  EXPECT_NEAR(ddp.layout.all_reduce_bytes, 2.0 * 0.5 * 7615616512.0 * 2.0, 1e3);
  EXPECT_EQ(ddp.layout.all_gather_bytes, 0.0);
  s.parallel = Parallel::fsdp;
  const StepWork fsdp = step_work(m, s);
  EXPECT_GT(fsdp.layout.all_gather_bytes, ddp.layout.all_reduce_bytes);  // layers twice + gradients once > gradients twice
  GpuSpec g = find_gpu("h200");
  const TimeEstimate fast = estimate_time(m, s, g, default_profile(g), false);
  EXPECT_GT(fast.communication_seconds, 0.0);
  EXPECT_NE(fast.bottleneck, Bottleneck::communication);
  g.gpu_link_bytes_per_s = 5e9;  // a slow link
  const TimeEstimate slow = estimate_time(m, s, g, default_profile(g), false);
  EXPECT_EQ(slow.bottleneck, Bottleneck::communication);
  EXPECT_GT(slow.step_seconds, 5.0 * fast.step_seconds);
  // Throughput counts every GPU's tokens.
  EXPECT_NEAR(fast.tokens_per_second, 2.0 * 2048.0 / fast.step_seconds, 1e-6 * fast.tokens_per_second);
}

}  // namespace
}  // namespace trainfit
