// Speed of the planner: one plan must take well under a millisecond (PRODUCT.md).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "trainfit/measurements.hpp"
#include "trainfit/time.hpp"
#include "trainfit/trainfit.hpp"

namespace {

using namespace trainfit;

void BM_EstimateMemory(benchmark::State& state) {
  const ModelSpec model = load_model("qwen2.5-7b");
  const GpuSpec& gpu = find_gpu("rtx-5070-ti");
  TrainingSetup s;
  s.method = Method::qlora;
  s.weights = DType::nf4;
  for (auto _ : state) benchmark::DoNotOptimize(estimate_memory(model, s, gpu));
}
BENCHMARK(BM_EstimateMemory);

void BM_EstimateTime(benchmark::State& state) {
  const ModelSpec model = load_model("qwen2.5-7b");
  const GpuSpec& gpu = find_gpu("h200");
  const TimeProfile profile = default_profile(gpu);
  TrainingSetup s;
  for (auto _ : state) benchmark::DoNotOptimize(estimate_time(model, s, gpu, profile, false));
}
BENCHMARK(BM_EstimateTime);

// A whole plan that fits: memory, verdict and time.
void BM_PlanThatFits(benchmark::State& state) {
  const ModelSpec model = load_model("qwen2.5-7b");
  const GpuSpec& gpu = find_gpu("h200");
  TrainingSetup s;
  for (auto _ : state) benchmark::DoNotOptimize(make_plan(model, s, gpu));
}
BENCHMARK(BM_PlanThatFits);

// A plan that does not fit also searches its alternatives (about eight more estimates).
void BM_PlanWithSuggestions(benchmark::State& state) {
  const ModelSpec model = load_model("qwen2.5-14b");
  const GpuSpec& gpu = find_gpu("rtx-5070-ti");
  TrainingSetup s;
  s.seq = 2048;
  for (auto _ : state) benchmark::DoNotOptimize(make_plan(model, s, gpu));
}
BENCHMARK(BM_PlanWithSuggestions);

// calibrate on 1,000 measured steps (the reference rows repeated): issue 16 found 24 s, the bar is
// well under a second, since each loss evaluation prices the steps' work counted once.
void BM_CalibrateThousandSteps(benchmark::State& state) {
  const std::vector<TimedStep> reference =
      timed_steps(load_measurements(TRAINFIT_SOURCE_DIR "/data/reference/h200-hf-peft-calibration.jsonl"));
  std::vector<TimedStep> steps;
  for (std::size_t i = 0; i < 1000; ++i) steps.push_back(reference[i % reference.size()]);
  const TimeProfile start = default_profile(steps.front().gpu);
  for (auto _ : state) benchmark::DoNotOptimize(calibrate(steps, start));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * steps.size()));
}
BENCHMARK(BM_CalibrateThousandSteps)->Unit(benchmark::kMillisecond);

void BM_ParseBuiltinModel(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(load_model("llama3.1-70b"));
}
BENCHMARK(BM_ParseBuiltinModel);

}  // namespace
