// Adding a layout is one row of the data-parallel schemes' table (setup/data_parallel.cpp): the
// test adds a scheme with ZeRO-3's properties under another name and finds it in `plan --help`,
// in plans that price it as ZeRO-3 is priced, in advise, in a bench matrix, in
// `trainfit schema` and in the web page's API, with no other code touched. In its own binary: the
// row stays for the rest of the process.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "extension/command_line.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/serve.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {
namespace {

using nlohmann::json;
using test::run;

Parallel add_the_layout() {
  static const Parallel added = [] {
    DataParallelScheme row = data_parallel_scheme(Parallel::zero3);
    row.name = "test-stage3";
    row.aliases = {"test-stage-three"};
    row.title = "Test stage 3";
    return add_data_parallel_scheme(row);
  }();
  return added;
}

json plan_of(const std::vector<std::string>& args) {
  const test::CommandResult r = run(args);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out);
}

std::vector<std::string> on_eight_gpus(const char* parallel, const char* offload) {
  return {"plan",       "--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--method", "full",     "--gpus", "8",
          "--parallel", parallel,  "--offload",  offload, "--seq",     "2048",     "--format", "json"};
}

TEST(AddLayout, OneRowReachesFlagsPlanAdviseMatrixSchemaAndThePage) {
  const Parallel test_stage3 = add_the_layout();
  EXPECT_EQ(to_string(test_stage3), "test-stage3");
  EXPECT_EQ(parse_parallel("test-stage-three"), test_stage3);

  // --help lists it among the layouts.
  const test::CommandResult help = run({"plan", "--help"});
  EXPECT_NE(help.out.find("test-stage3"), std::string::npos) << help.out;

  // It plans as ZeRO-3 does, offloads included, and keeps its own name.
  for (const char* offload : {"none", "optimizer", "optimizer,params"}) {
    const json ours = plan_of(on_eight_gpus("test-stage3", offload));
    const json zero3 = plan_of(on_eight_gpus("zero3", offload));
    EXPECT_EQ(ours["setup"]["parallel"], "test-stage3");
    EXPECT_EQ(ours["memory"], zero3["memory"]) << offload;
    EXPECT_EQ(ours["time"], zero3["time"]) << offload;
    EXPECT_EQ(ours["verdict"], zero3["verdict"]) << offload;
  }
  // Its row's refusals are ZeRO-3's (parameters offloaded, NVMe allowed) and its QLoRA rule.
  EXPECT_EQ(plan_of({"plan", "--model", "qwen2.5-7b", "--gpu", "h200", "--gpus", "4", "--parallel", "test-stage3",
                     "--offload", "params", "--offload-device", "nvme", "--format", "json"})["setup"]["offload_device"],
            "nvme");
  try {
    (void)run({"plan", "--model", "qwen2.5-7b", "--gpu", "h200", "--method", "qlora", "--weights", "nf4", "--gpus", "4",
               "--parallel", "test-stage3"});
    ADD_FAILURE() << "QLoRA accepted under a scheme whose row does not take it";
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "parallel");
  }

  // advise searches under it when it is given, and prices it as ZeRO-3 (a free layout tries it
  // too, but its results equal ZeRO-3's and advise lists each distinct result once).
  const auto advise_under = [](const char* parallel) {
    const test::CommandResult r = run({"advise", "--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--method", "full",
                                       "--gpus", "8", "--parallel", parallel, "--top", "3", "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.out;
    return json::parse(r.out)["results"];
  };
  const json ours_advised = advise_under("test-stage3"), zero3_advised = advise_under("zero3");
  ASSERT_EQ(ours_advised.size(), zero3_advised.size());
  ASSERT_FALSE(ours_advised.empty());
  for (std::size_t i = 0; i < ours_advised.size(); ++i) {
    EXPECT_EQ(ours_advised[i]["setup"]["parallel"], "test-stage3");
    EXPECT_EQ(ours_advised[i]["step_seconds"], zero3_advised[i]["step_seconds"]);
    EXPECT_EQ(ours_advised[i]["peak_allocated_bytes"], zero3_advised[i]["peak_allocated_bytes"]);
  }

  // A bench matrix varies it.
  const bench::ExperimentPlan plan = bench::parse_experiment_plan(R"(
name = "layout"
[matrix]
model = "qwen2.5-0.5b"
gpus = 2
parallel = ["zero3", "test-stage3"]
)",
                                                                  "layout.toml");
  const auto configs = bench::expand_matrix(plan);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(bench::config_to_json(configs[1])["parallel"], "test-stage3");

  // The schema lists it, and the settings that apply under its framework apply under it.
  const json schema = json::parse(run({"schema"}).out);
  const json& choices = schema["properties"]["parallel"]["enum"];
  EXPECT_NE(std::find(choices.begin(), choices.end(), "test-stage3"), choices.end()) << choices.dump();

  // The page's plan.
  const serve::Response planned = serve::handle(
      {"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "h200"}, {"gpus", "8"}, {"parallel", "test-stage3"}}, ""});
  ASSERT_EQ(planned.status, 200) << planned.body;
  EXPECT_EQ(json::parse(planned.body)["setup"]["parallel"], "test-stage3");
}

TEST(AddLayout, AnFsdp2SchemeTakesFsdpsMixedPrecisionSettings) {
  DataParallelScheme row = data_parallel_scheme(Parallel::fsdp);
  row.name = "test-fsdp";
  row.aliases = {};
  const Parallel p = add_data_parallel_scheme(row);
  const json plan =
      plan_of({"plan", "--model", "qwen2.5-7b", "--gpu", "h200", "--method", "full", "--gpus", "4", "--parallel",
               "test-fsdp", "--fsdp-param-dtype", "bf16", "--weights", "fp32", "--format", "json"});
  EXPECT_EQ(plan["setup"]["fsdp_param_dtype"], "bf16");
  EXPECT_EQ(to_string(p), "test-fsdp");
}

TEST(AddLayout, NamesAreUnique) {
  (void)add_the_layout();
  DataParallelScheme again = data_parallel_scheme(Parallel::ddp);
  EXPECT_THROW(add_data_parallel_scheme(again), InputError);  // "ddp"
  again.name = "another";
  again.aliases = {"full-shard"};  // an alias of fsdp
  EXPECT_THROW(add_data_parallel_scheme(again), InputError);
  again.name = "test-stage-three";  // an alias of the test's scheme
  again.aliases = {};
  EXPECT_THROW(add_data_parallel_scheme(again), InputError);
}

}  // namespace
}  // namespace trainfit
