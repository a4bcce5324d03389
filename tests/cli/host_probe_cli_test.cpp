// `trainfit calibrate --host` for real, through a fake runner (tests/cli/fake_host_probe_runner.py:
// every step takes a known time) and through the real runner on a machine without a GPU; the
// profile it writes in `plan`; `bench --host-probe` handing its runners the request; `validate`
// pricing a row with its own host figure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_test_files.hpp"
#include "run_cli.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::run_cli;

const std::string kFake = std::string("python3 ") + TRAINFIT_SOURCE_DIR + "/tests/cli/fake_host_probe_runner.py";

std::string temp(const std::string& name) {
  return (fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()))).string();
}

// The operations trainfit counts for the probe's setups, from the request the CLI prints.
double operations(const json& request, const std::string& name) {
  const ModelSpec m = parse_model_config(request["model"].dump(), "probe");
  for (const auto& r : request["runs"])
    if (r["name"] == name) {
      const TrainingSetup s = setup_from_json(r["config"]);
      return host_operations(step_work(m, s), s);
    }
  ADD_FAILURE() << "no run " << name;
  return 1;
}

json printed_request(const std::string& args = "") {
  const auto r = run_cli("calibrate --host --print-request " + args);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out);
}

TEST(HostProbeCli, FakeRunnersStepTimeOverTrainfitsOperationsIsTheProfilesFigure) {
  const std::string out = temp("host-full.toml");
  const auto r = run_cli("calibrate --host --method full --gpu h200 --runner '" + kFake + "' --out " + out,
                         "FAKE_STEP_SECONDS=0.0625");
  ASSERT_EQ(r.code, 0) << r.out;
  const TimeProfile p = load_profile(out);
  EXPECT_DOUBLE_EQ(p.host_seconds_per_op, 0.0625 / operations(printed_request("--method full"), "full"));
  // The rest is the card's default profile.
  TimeProfile expected = default_profile(find_gpu("h200"));
  expected.host_seconds_per_op = p.host_seconds_per_op;
  expected.name = "h200-hf-peft-host";
  expected.source = p.source;
  EXPECT_EQ(profile_to_toml(p), profile_to_toml(expected));
  for (const char* text :
       {"Fake CPU 9000", "torch 2.11.0+cu130", "2026-12-01T12:00:00Z", "NVIDIA H200", "GPU busy at most 10%"})
    EXPECT_NE(p.source.find(text), std::string::npos) << text << " not in " << p.source;
  // What was measured is printed beside the profile.
  EXPECT_NE(r.out.find("# host dispatch:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU busy 10%"), std::string::npos) << r.out;
}

TEST(HostProbeCli, BothMethodsWeighTheirSteps) {
  const std::string out = temp("host-both.toml");
  const auto r = run_cli("calibrate --host --runner '" + kFake + "' -o " + out, "FAKE_STEP_SECONDS=0.1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json request = printed_request();
  EXPECT_DOUBLE_EQ(load_profile(out).host_seconds_per_op,
                   0.2 / (operations(request, "full") + operations(request, "lora")));
  EXPECT_NE(r.out.find("full and lora differ by"), std::string::npos) << r.out;
  // The card came from the runner's record ("NVIDIA H200"): the H200's profile is the base.
  EXPECT_NE(r.out.find("name = 'h200-hf-peft-host'"), std::string::npos) << r.out;
  // plan --profile takes it: a host-bound step (0.5B LoRA) moves with it.
  const auto plain = run_cli("plan --model qwen2.5-0.5b --gpu h200 --format json");
  const auto mine = run_cli("plan --model qwen2.5-0.5b --gpu h200 --format json --profile " + out);
  ASSERT_EQ(mine.code, 0) << mine.out;
  const double ratio = json::parse(mine.out)["time"]["step_seconds"].get<double>() /
                       json::parse(plain.out)["time"]["step_seconds"].get<double>();
  EXPECT_NEAR(ratio, load_profile(out).host_seconds_per_op / default_profile(find_gpu("h200")).host_seconds_per_op,
              1e-6);
}

TEST(HostProbeCli, NoGpuNoTorchAndBusyGpusAreRefused) {
  struct Case {
    const char* probe;
    const char* message;
  };
  for (const Case c : {Case{"no-cuda", "no CUDA device"}, Case{"no-torch", "torch is not installed"},
                       Case{"busy", "is not host-bound: the GPU was busy 90%"},
                       Case{"unchecked", "could not check that its full step is host-bound"},
                       Case{"silent", "exited with 1 without writing the host probe's record"}}) {
    const std::string out = temp(std::string("host-") + c.probe + ".toml");
    const auto r = run_cli("calibrate --host --runner '" + kFake + "' -o " + out, std::string("FAKE_PROBE=") + c.probe);
    EXPECT_EQ(r.code, 3) << c.probe << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.probe << ": " << r.out;
    EXPECT_FALSE(fs::exists(out)) << c.probe;
  }
  // Unchecked on request, and said so.
  const auto unchecked = run_cli("calibrate --host --no-busy-check --runner '" + kFake + "'", "FAKE_PROBE=unchecked");
  EXPECT_EQ(unchecked.code, 0) << unchecked.out;
  EXPECT_NE(unchecked.out.find("GPU busy time not checked"), std::string::npos) << unchecked.out;
  // A runner that is not there.
  const auto missing = run_cli("calibrate --host --runner /nonexistent/runner");
  EXPECT_EQ(missing.code, 3) << missing.out;
  EXPECT_NE(missing.out.find("cannot execute"), std::string::npos) << missing.out;
}

TEST(HostProbeCli, ACpuMeasurementSaysSo) {
  const auto r = run_cli("calibrate --host --device cpu --runner '" + kFake + "'", "FAKE_PROBE=cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("measured on the CPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not a GPU's dispatch cost"), std::string::npos) << r.out;
}

TEST(HostProbeCli, FlagsAreChecked) {
  EXPECT_EQ(run_cli("calibrate").code, 2);
  EXPECT_EQ(run_cli("calibrate --gpu h200 x.jsonl").code, 2);
  EXPECT_EQ(run_cli("calibrate --host x.jsonl").code, 2);
  EXPECT_EQ(run_cli("calibrate --host --method qlora --print-request").code, 2);
  EXPECT_EQ(run_cli("calibrate --host --layers 0 --print-request").code, 2);
  EXPECT_EQ(run_cli("calibrate --host --gpu no-such-card --runner /bin/false").code, 2);
  const json request = printed_request("--layers 4 --steps 7 --warmup 2");
  EXPECT_EQ(request["model"]["num_hidden_layers"], 4);
  EXPECT_EQ(request["steps"], 7);
  EXPECT_EQ(request["runs"].size(), 2u);
}

// The real runner with the machine's own python3. Without a GPU (CI, a laptop), torch, CUDA or
// transformers is missing, and the command says which, with exit code 3.
TEST(HostProbeCli, RealRunnerWithoutAGpuSaysWhatIsMissing) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is here: the gpu-labelled test runs the real thing";
  const auto r = run_cli("calibrate --host --runner 'python3 -m trainfit_runner' --timeout 300");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(r.out.find("torch is not installed") != std::string::npos ||
              r.out.find("no CUDA device") != std::string::npos)
      << r.out;
  // On the CPU, asked for: it runs where transformers and peft are installed, and says it is the
  // CPU's figure; elsewhere it names what is missing.
  const auto cpu =
      run_cli("calibrate --host --device cpu --steps 3 --warmup 1 --layers 2 --runner 'python3 -m trainfit_runner'");
  if (cpu.code == 0) {
    EXPECT_NE(cpu.out.find("measured on the CPU"), std::string::npos) << cpu.out;
  } else {
    EXPECT_EQ(cpu.code, 3) << cpu.out;
    EXPECT_TRUE(cpu.out.find("torch is not installed") != std::string::npos ||
                cpu.out.find("transformers is not installed") != std::string::npos ||
                cpu.out.find("peft is not installed") != std::string::npos)
        << cpu.out;
  }
}

// bench --host-probe: every runner finds the request through $TRAINFIT_HOST_PROBE.
TEST(HostProbeCli, BenchHandsItsRunnersTheRequest) {
  const fs::path dir = testing::fresh_bench_dir("host-probe");
  const std::string plan = testing::write_bench_plan(dir, R"(
name = "host"
[run]
steps = 2
warmup = 1
timeout = 30
[matrix]
model = "qwen2.5-0.5b"
x_do = ["ok"]
)");
  const auto r = run_cli("bench " + plan + " --host-probe --no-telemetry --results " + (dir / "out").string() +
                         " --runner " + TRAINFIT_STANDIN_RUNNER);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = testing::results_rows(dir / "out");
  ASSERT_EQ(rows.size(), 1u);
  const std::string path = rows[0]["measured"]["standin"]["host_probe"].get<std::string>();
  std::ifstream f(path);
  EXPECT_EQ(json::parse(f), printed_request());
  // Without the flag, none.
  const fs::path plain = testing::fresh_bench_dir("no-host-probe");
  const std::string plan2 = testing::write_bench_plan(plain, "name = \"plain\"\n[matrix]\nmodel = \"qwen2.5-0.5b\"\n");
  ASSERT_EQ(run_cli("bench " + plan2 + " --no-telemetry --results " + (plain / "out").string() + " --runner " +
                    TRAINFIT_STANDIN_RUNNER)
                .code,
            0);
  EXPECT_TRUE(testing::results_rows(plain / "out")[0]["measured"]["standin"]["host_probe"].is_null());
}

// validate prices a row with the host figure it carries (a probe record from the fake runner),
// and with the profile's under --profile-host.
TEST(HostProbeCli, ValidateUsesTheRowsOwnHostFigure) {
  const std::string record_path = temp("record.json");
  ASSERT_EQ(run_cli("calibrate --host --method lora --runner '" + kFake + "' --record " + record_path,
                    "FAKE_STEP_SECONDS=0.2")
                .code,
            0);
  std::ifstream f(record_path);
  const json record = json::parse(f);
  const double per_op = 0.2 / operations(record["request"], "lora");
  const std::string rows = temp("rows.jsonl");
  std::ofstream(rows) << json{{"config",
                               {{"model", "qwen2.5-0.5b"}, {"method", "lora"}, {"seq", 512}, {"gpu", "h200"}}},
                              {"measured",
                               {{"status", "ok"},
                                {"peak_allocated_mib", 9000.0},
                                {"step_seconds_median", 0.2},
                                {"host_probe", record}}}}
                             .dump()
                      << "\n";
  const auto own = run_cli("validate " + rows + " --format json");
  ASSERT_EQ(own.code, 0) << own.out;
  const json a = json::parse(own.out);
  EXPECT_EQ(a["rows"][0]["host_from_row"], true);
  EXPECT_DOUBLE_EQ(a["rows"][0]["host_seconds_per_op"].get<double>(), per_op);
  EXPECT_EQ(a["rows_with_own_host"], 1);
  const json b = json::parse(run_cli("validate " + rows + " --format json --profile-host").out);
  EXPECT_EQ(b["rows"][0]["host_from_row"], false);
  const auto text = run_cli("validate " + rows);
  EXPECT_NE(text.out.find("1 of them priced with their own host dispatch time"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace trainfit
