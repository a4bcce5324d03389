// The host probe (include/trainfit/host_probe.hpp): the steps it asks for, the operations trainfit
// counts for them, and the division of a runner's step times by those counts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

// A runner's record for `request`: every step `seconds` long, the GPU busy `busy` of each.
json record_for(const json& request, double seconds, std::optional<double> busy = 0.1) {
  json runs = json::array();
  for (const auto& r : request["runs"]) {
    json run = {
        {"name", r["name"]},
        {"step_seconds",
         std::vector<double>(request["warmup"].get<std::size_t>() + request["steps"].get<std::size_t>(), seconds)},
        {"warmup", request["warmup"]}};
    if (busy) run["gpu_busy_seconds"] = *busy * seconds;
    runs.push_back(run);
  }
  return {{"schema", "trainfit.host_probe/1"},
          {"status", "ok"},
          {"request", request},
          {"device", "cuda"},
          {"gpu", "NVIDIA H200"},
          {"cpu", "Test CPU 1"},
          {"torch", "2.11.0"},
          {"measured_at", "2026-12-01T00:00:00Z"},
          {"runs", runs}};
}

double operations_of(const json& request, std::size_t run) {
  const ModelSpec m = parse_model_config(request["model"].dump(), "probe");
  const TrainingSetup s = setup_from_json(request["runs"][run]["config"]);
  return host_operations(step_work(m, s), s);
}

TEST(HostProbe, RequestIsATinyQwen2WithFullAndLoraSteps) {
  const json r = host_probe_request();
  EXPECT_EQ(r["model"]["model_type"], "qwen2");
  EXPECT_EQ(r["model"]["hidden_size"], 64);
  EXPECT_EQ(r["model"]["num_hidden_layers"], 24);
  ASSERT_EQ(r["runs"].size(), 2u);
  EXPECT_EQ(r["runs"][0]["name"], "full");
  EXPECT_EQ(r["runs"][1]["name"], "lora");
  EXPECT_EQ(r["runs"][1]["config"]["method"], "lora");
  EXPECT_EQ(r["device"], "cuda");
  EXPECT_EQ(r["busy_check"], true);
  HostProbeOptions o;
  o.layers = 0;
  EXPECT_THROW(host_probe_request(o), InputError);
  o = {};
  o.device = "tpu";
  EXPECT_THROW(host_probe_request(o), InputError);
  o = {};
  o.methods = {Method::qlora};
  EXPECT_THROW(host_probe_request(o), InputError);
}

// The counts docs/model.md gives: a layer's 50 forward operations, 7 per LoRA branch (7 targets a
// layer), 32 outside the layers, one backward node per forward operation; the optimizer's at a
// quarter: fused AdamW's 10 plus half an operation per trainable tensor (24 x 12 + 3 of the model,
// 2 x 168 adapters).
TEST(HostProbe, OperationsAreTheTimeModelsCounts) {
  const json r = host_probe_request();
  EXPECT_DOUBLE_EQ(operations_of(r, 0), 2.0 * (24 * 50 + 32) + 0.25 * (10 + 0.5 * (24 * 12 + 3)));
  EXPECT_DOUBLE_EQ(operations_of(r, 1), 2.0 * (24 * (50 + 7 * 7) + 32) + 0.25 * (10 + 0.5 * 2 * 168));
  // The same counts as Qwen2.5-0.5B's step, whose 24 layers the probe copies: what it is meant to predict.
  for (const Method method : {Method::full, Method::lora}) {
    TrainingSetup s;
    s.method = method;
    const double probe = operations_of(r, method == Method::full ? 0 : 1);
    EXPECT_DOUBLE_EQ(host_operations(step_work(load_model("qwen2.5-0.5b"), s), s), probe);
  }
  // Accumulation multiplies the micro-batches' operations, not the optimizer's.
  TrainingSetup s;
  s.grad_accum = 4;
  const StepWork w = step_work(load_model("qwen2.5-0.5b"), s);
  EXPECT_DOUBLE_EQ(host_operations(w, s), 4 * w.ops + w.optimizer_ops);
  // DDP's bucket copies run once a step, in the micro-batch that synchronises.
  TrainingSetup ddp = s;
  ddp.gpus = 2;
  const StepWork d = step_work(load_model("qwen2.5-0.5b"), ddp);
  EXPECT_GT(d.step_ops, 0);
  EXPECT_DOUBLE_EQ(host_operations(d, ddp), 4 * d.ops + d.step_ops + d.optimizer_ops);
  // So they do under a pipeline (its stages' replicas all-reduce after the last micro-batch).
  TrainingSetup piped = ddp;
  piped.gpus = 4;
  piped.pp = 2;
  piped.microbatches = 8;
  const StepWork p = step_work(load_model("qwen2.5-0.5b"), piped);
  EXPECT_GT(p.step_ops, 0);
  EXPECT_DOUBLE_EQ(host_operations(p, piped), 4 * 8 * p.ops + p.step_ops + p.optimizer_ops);
}

TEST(HostProbe, FigureIsStepTimeOverOperations) {
  const json request = host_probe_request();
  const HostDispatch d = host_dispatch_from_probe(record_for(request, 0.08));
  ASSERT_EQ(d.runs.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(d.runs[i].seconds_per_op, 0.08 / operations_of(request, i));
    EXPECT_EQ(d.runs[i].step_seconds.size(), 15u);  // the warm-up left out
    EXPECT_DOUBLE_EQ(*d.runs[i].gpu_busy_fraction, 0.1);
  }
  // Both: the steps' time over their operations.
  EXPECT_DOUBLE_EQ(d.seconds_per_op, 0.16 / (operations_of(request, 0) + operations_of(request, 1)));
  EXPECT_EQ(d.cpu, "Test CPU 1");
  EXPECT_EQ(d.layers, 24);
  // A time model at that rate gives the probe's own steps back: they are host-bound in it too.
  TimeProfile p = default_profile(find_gpu("h200"));
  p.host_seconds_per_op = d.runs[1].seconds_per_op;
  const TimeEstimate t =
      estimate_time(parse_model_config(request["model"].dump(), "probe"), d.runs[1].setup, find_gpu("h200"), p, false);
  EXPECT_NEAR(t.step_seconds, 0.08, 1e-12);
  EXPECT_EQ(t.bottleneck, Bottleneck::launch_overhead);
}

TEST(HostProbe, SpreadIsTheQuartilesOfTheRepeats) {
  HostProbeOptions o;
  o.methods = {Method::full};
  o.steps = 5;
  o.warmup = 1;
  const json request = host_probe_request(o);
  json rec = record_for(request, 0.1);
  rec["runs"][0]["step_seconds"] = {9.0, 0.10, 0.12, 0.08, 0.11, 0.09};  // the first is warm-up
  const HostDispatch d = host_dispatch_from_probe(rec);
  const double ops = operations_of(request, 0);
  EXPECT_DOUBLE_EQ(d.runs[0].median_seconds, 0.10);
  EXPECT_DOUBLE_EQ(d.low, 0.09 / ops);
  EXPECT_DOUBLE_EQ(d.high, 0.11 / ops);
  EXPECT_DOUBLE_EQ(d.runs[0].min, 0.08 / ops);
  EXPECT_DOUBLE_EQ(d.runs[0].max, 0.12 / ops);
}

TEST(HostProbe, RefusesWhatIsNotAHostBoundMeasurement) {
  const json request = host_probe_request();
  auto fails_with = [](const json& rec, const std::string& text, const HostProbeCheck& check = {}) {
    try {
      host_dispatch_from_probe(rec, check);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const HostProbeFailed& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  fails_with(record_for(request, 0.08, 0.9), "is not host-bound: the GPU was busy 90%");
  json no_gpu = {{"status", "error"}, {"error", "no CUDA device: torch sees no GPU"}};
  fails_with(no_gpu, "no CUDA device");
  json unchecked = record_for(request, 0.08, std::nullopt);
  unchecked["runs"][0]["busy_error"] = "RuntimeError: no CUPTI";
  fails_with(unchecked, "could not check that its full step is host-bound");
  fails_with(unchecked, "no CUPTI");
  EXPECT_FALSE(host_dispatch_from_probe(unchecked, {.require_busy_check = false}).busy_checked);
  // On the CPU nothing is checked: the figure is the CPU's own, and says so.
  json cpu = record_for(request, 0.08, std::nullopt);
  cpu["device"] = "cpu";
  EXPECT_EQ(host_dispatch_from_probe(cpu).device, "cpu");
}

TEST(HostProbe, MalformedRecordsNameTheirField) {
  const json request = host_probe_request();
  auto input_error = [](json rec, const std::string& field) {
    try {
      host_dispatch_from_probe(rec);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  json rec = record_for(request, 0.08);
  rec["runs"][1]["step_seconds"][4] = "fast";
  input_error(rec, "runs[1].step_seconds[4]");
  rec = record_for(request, 0.08);
  rec["runs"][0]["step_seconds"] = {0.1, 0.1, 0.1, 0.1};  // three warm-up steps leave one
  input_error(rec, "at least 3");
  rec = record_for(request, 0.08);
  rec["runs"].erase(1);
  input_error(rec, "runs");
  rec = record_for(request, 0.08);
  rec["request"]["model"]["hidden_size"] = -1;
  input_error(rec, "request.model");
  rec = record_for(request, 0.08);
  rec["schema"] = "other";
  input_error(rec, "schema");
  EXPECT_THROW(host_dispatch_from_probe(json::array()), InputError);
}

TEST(HostProbe, ProfileIsTheCardsDefaultWithTheMeasuredHost) {
  const GpuSpec& h200 = find_gpu("h200");
  const HostDispatch d = host_dispatch_from_probe(record_for(host_probe_request(), 0.08));
  const TimeProfile p = host_profile(d, h200, "mine");
  TimeProfile expected = default_profile(h200);
  expected.host_seconds_per_op = d.seconds_per_op;
  expected.name = "mine";
  expected.source = p.source;
  EXPECT_EQ(profile_to_toml(p), profile_to_toml(expected));
  for (const char* text : {"Test CPU 1", "2026-12-01T00:00:00Z", "torch 2.11.0", "NVIDIA H200", "calibrate --host",
                           "GPU busy at most 10%", "H200 rates measured"})
    EXPECT_NE(p.source.find(text), std::string::npos) << text << " not in " << p.source;
  // And it reads back as written.
  EXPECT_DOUBLE_EQ(parse_profile(profile_to_toml(p), "p").host_seconds_per_op, d.seconds_per_op);
}

// A row that carries its own host probe is priced with it by validate, unless told otherwise.
TEST(HostProbe, ValidatePricesARowWithItsOwnHostFigure) {
  HostProbeOptions o;
  o.methods = {Method::lora};
  const json request = host_probe_request(o);
  const double ops = operations_of(request, 0);
  const double per_op = 40e-6;
  json row = {{"config", {{"model", "qwen2.5-0.5b"}, {"method", "lora"}, {"seq", 512}, {"gpu", "h200"}}},
              {"measured",
               {{"status", "ok"},
                {"peak_allocated_mib", 9000.0},
                {"step_seconds_median", 0.2},
                {"host_probe", record_for(request, per_op * ops)}}}};
  const auto steps = parse_measurements(row.dump() + "\n", "rows.jsonl");
  ASSERT_EQ(steps.size(), 1u);
  ASSERT_TRUE(steps[0].measured.host_seconds_per_op);
  EXPECT_NEAR(*steps[0].measured.host_seconds_per_op, per_op, 1e-15);
  const ComparisonSummary own = compare_with_measurements(steps);
  const ComparisonSummary profile = compare_with_measurements(steps, nullptr, {.row_host = false});
  ASSERT_EQ(own.rows.size(), 1u);
  EXPECT_TRUE(own.rows[0].host_from_row);
  EXPECT_EQ(own.rows_with_own_host, 1u);
  EXPECT_FALSE(profile.rows[0].host_from_row);
  EXPECT_DOUBLE_EQ(profile.rows[0].host_seconds_per_op, default_profile(find_gpu("h200")).host_seconds_per_op);
  // A host-bound step: its prediction moves with the host figure.
  EXPECT_NEAR(own.rows[0].predicted_step_seconds / profile.rows[0].predicted_step_seconds,
              per_op / profile.rows[0].host_seconds_per_op, 1e-9);
  // A probe that failed leaves the row standing, with the reason beside it.
  row["measured"]["host_probe"] = {{"status", "error"}, {"error", "no CUDA device"}};
  const auto failed = parse_measurements(row.dump() + "\n", "rows.jsonl");
  EXPECT_FALSE(failed[0].measured.host_seconds_per_op);
  EXPECT_NE(failed[0].measured.host_probe_note.find("no CUDA device"), std::string::npos);
  const ComparisonSummary noted = compare_with_measurements(failed);
  ASSERT_EQ(noted.host_probe_notes.size(), 1u);
  EXPECT_EQ(noted.rows_with_own_host, 0u);
}

}  // namespace
}  // namespace trainfit
