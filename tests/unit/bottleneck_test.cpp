// The one bottleneck vocabulary (include/trainfit/bottleneck.hpp): every word reads back as its
// value, and what plan, trace and watch print are its words; one job named by all three tools
// gets one value.
#include "trainfit/bottleneck.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "trainfit/telemetry.hpp"
#include "trainfit/trace.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {

// gtest's name for a value in a failure: its word, not its bytes.
void PrintTo(Bottleneck b, std::ostream* os) {
  *os << to_string(b);
}

namespace {

const std::string kData = std::string(TRAINFIT_SOURCE_DIR) + "/data/";

std::set<std::string> words() {
  std::set<std::string> out;
  for (const Bottleneck b : kBottlenecks) out.insert(to_string(b));
  return out;
}

std::set<std::string> watch_verdicts() {
  std::set<std::string> out;
  for (const Bottleneck b : kBottlenecks) out.insert(std::string(watch_verdict(b)));
  return out;
}

// Every string under a "verdict" or "bottleneck" key, however deep.
void collect_names(const nlohmann::json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (value.is_string() && (key.ends_with("verdict") || key.ends_with("bottleneck")))
        out.push_back(value.get<std::string>());
      else
        collect_names(value, out);
    }
  } else if (j.is_array()) {
    for (const auto& value : j) collect_names(value, out);
  }
}

TEST(Bottleneck, WordsAndWatchVerdictsRoundTrip) {
  EXPECT_EQ(words().size(), kBottlenecks.size());  // no two values share a word
  EXPECT_EQ(watch_verdicts().size(), kBottlenecks.size());
  for (const Bottleneck b : kBottlenecks) {
    EXPECT_FALSE(to_string(b).empty());
    EXPECT_EQ(parse_bottleneck(to_string(b)), b) << to_string(b);
    EXPECT_EQ(parse_bottleneck(watch_verdict(b)), b) << watch_verdict(b);
  }
  // What recordings' phase markers write as "expect".
  EXPECT_EQ(parse_bottleneck("host"), Bottleneck::launch_overhead);
  EXPECT_EQ(parse_bottleneck("capacity"), Bottleneck::capacity);
  EXPECT_EQ(parse_bottleneck("input"), Bottleneck::input_pipeline);
  EXPECT_THROW(parse_bottleneck("slow"), InputError);
  EXPECT_THROW(parse_bottleneck("none"), InputError);  // trace's "no verdict" is no bottleneck
}

// The words the tools printed before they shared the enum: JSON lines, /metrics and the golden
// recordings depend on them.
TEST(Bottleneck, WordsAreThoseTheToolsAlwaysPrinted) {
  EXPECT_EQ(to_string(Bottleneck::compute), "compute");
  EXPECT_EQ(to_string(Bottleneck::memory_bandwidth), "memory-bandwidth");
  EXPECT_EQ(to_string(Bottleneck::launch_overhead), "launch-overhead");
  EXPECT_EQ(to_string(Bottleneck::host_link_spill), "host-link/spill");
  EXPECT_EQ(to_string(Bottleneck::offload), "offload");
  EXPECT_EQ(to_string(Bottleneck::communication), "communication");
  EXPECT_EQ(to_string(Bottleneck::input_pipeline), "input-pipeline");
  EXPECT_EQ(watch_verdict(Bottleneck::idle), "idle");
  EXPECT_EQ(watch_verdict(Bottleneck::compute), "compute-bound");
  EXPECT_EQ(watch_verdict(Bottleneck::input_pipeline), "input-pipeline-bound");
  EXPECT_EQ(watch_verdict(Bottleneck::communication), "communication-bound");
  EXPECT_EQ(watch_verdict(Bottleneck::capacity), "capacity-bound");
  EXPECT_EQ(watch_verdict(Bottleneck::host_link_spill), "host-spill-suspected");
  EXPECT_EQ(watch_verdict(Bottleneck::throttled), "throttled");
  EXPECT_EQ(watch_verdict(Bottleneck::memory_growth), "memory-growing");
  EXPECT_EQ(watch_verdict(Bottleneck::unknown), "unknown");
  EXPECT_EQ(watch_verdict(Bottleneck::launch_overhead), "host-bound");
  EXPECT_EQ(watch_verdict(Bottleneck::straggler), "straggler");
}

Plan plan_for(const std::string& model, TrainingSetup setup, const std::string& gpu) {
  setup.model = model;
  setup.gpu = gpu;
  return make_plan(load_model(model), setup, find_gpu(gpu));
}

// Qwen2.5-0.5B, LoRA r16, 1 x 128 tokens on an H200: the job data/trace/lora-small profiled and
// data/watch/h200_2026-12-01_host.jsonl watched. Plan, trace and watch each print their word for
// it, and the words are the one value's.
TEST(Bottleneck, PlanTraceAndWatchNameOneJobWithOneValue) {
  TrainingSetup small;
  small.seq = 128;
  const Plan plan = plan_for("qwen2.5-0.5b", small, "h200");
  const nlohmann::json plan_json = plan_to_json(plan);
  EXPECT_EQ(plan_json["time"]["bottleneck"], "launch-overhead");
  EXPECT_EQ(parse_bottleneck(plan_json["time"]["bottleneck"].get<std::string>()), Bottleneck::launch_overhead);

  const trace::TraceReport trace = trace::analyse_trace(kData + "trace/lora-small/trace.json.gz");
  ASSERT_EQ(trace.ranks.size(), 1u);
  const trace::RankTrace& rank = trace.ranks.front();
  EXPECT_EQ(rank.total.verdict, Bottleneck::launch_overhead) << rank.total.evidence;
  const trace::PlanComparison beside = trace::compare_with_plan(rank, nullptr, plan);
  EXPECT_EQ(parse_bottleneck(beside.measured_verdict), parse_bottleneck(beside.predicted_verdict));

  const telemetry::Recording job = telemetry::load_recording(kData + "watch/h200_2026-12-01_host.jsonl");
  const std::vector<telemetry::PhaseScore> scores = telemetry::score_recording(job);
  ASSERT_FALSE(scores.empty());
  for (const telemetry::PhaseScore& phase : scores) {
    EXPECT_EQ(phase.expected, Bottleneck::launch_overhead) << phase.label;
    EXPECT_GT(phase.right, 0.9 * phase.windows) << phase.label;
  }
}

TEST(Bottleneck, PlanJsonNamesAWord) {
  TrainingSetup big;
  big.seq = 2048;
  big.batch = 4;
  big.grad_ckpt = true;
  TrainingSetup seed;  // the seed's 14B on 16 GB: it spills through the Windows driver's fallback
  seed.method = Method::qlora;
  seed.weights = DType::nf4;
  seed.platform = Platform::on_windows;
  for (const Plan& p : {plan_for("qwen2.5-14b", big, "h200"), plan_for("qwen2.5-14b", seed, "rtx-5070-ti")}) {
    std::vector<std::string> names;
    collect_names(plan_to_json(p)["time"], names);
    ASSERT_EQ(names.size(), 1u);
    EXPECT_TRUE(words().contains(names.front())) << names.front();
    EXPECT_EQ(parse_bottleneck(names.front()), p.time.bottleneck);
  }
}

// Every verdict trace's JSON prints (each step's, the run's) on recordings of different causes.
TEST(Bottleneck, TraceJsonNamesWords) {
  for (const char* job : {"lora-small", "loader", "h2d"}) {
    const trace::TraceReport report = trace::analyse_trace(kData + "trace/" + job + "/trace.json.gz");
    std::vector<std::string> names;
    collect_names(nlohmann::json::parse(trace::render_trace(report, nullptr, nullptr, Format::json)), names);
    ASSERT_FALSE(names.empty()) << job;
    for (const std::string& name : names) EXPECT_TRUE(words().contains(name)) << job << ": " << name;
  }
}

// Every verdict of watch's JSON lines on the recorded jobs, the bottleneck and the warnings after it.
TEST(Bottleneck, WatchJsonNamesWatchVerdicts) {
  std::set<std::string> seen;
  for (const char* file : {"h200_2026-12-01_compute.jsonl", "h200_2026-12-01_input.jsonl", "h200_2026-12-01_host.jsonl",
                           "h200_2026-12-01_leak.jsonl", "h200_capacity_bound.jsonl", "h200x2_2026-12-01_ddp.jsonl",
                           "h200x2_2026-12-01_straggler.jsonl"}) {
    const telemetry::Recording r = telemetry::load_recording(kData + "watch/" + file);
    for (const telemetry::Diagnosis& d : telemetry::diagnose_recording(r)) {
      const nlohmann::json line = telemetry::diagnosis_to_json(d);
      std::vector<std::string> names{line["verdict"].get<std::string>()};
      for (const auto& also : line["also"]) names.push_back(also["verdict"].get<std::string>());
      ASSERT_EQ(names.size(), d.verdicts.size()) << file;
      for (std::size_t i = 0; i < names.size(); ++i) {
        EXPECT_TRUE(watch_verdicts().contains(names[i])) << file << ": " << names[i];
        EXPECT_EQ(parse_bottleneck(names[i]), d.verdicts[i].kind) << file << ": " << names[i];
        seen.insert(names[i]);
      }
    }
  }
  for (const char* verdict : {"compute-bound", "input-pipeline-bound", "host-bound", "capacity-bound", "memory-growing",
                              "communication-bound", "straggler"})
    EXPECT_TRUE(seen.contains(verdict)) << verdict;
}

}  // namespace
}  // namespace trainfit
