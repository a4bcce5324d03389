// Adding a setting is one row of the settings table: the test adds a row and finds the setting in
// `plan --help`, in the plan's JSON, in advise's setups, in a bench matrix and its configs, in the
// criteria, in `trainfit schema` and in the web page's API, with no other code touched. In its own
// binary: the row stays in the table for the rest of the process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "extension/command_line.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/serve.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

void add_the_knob() {
  static const bool added = [] {
    Setting row;
    row.key = "test_knob";
    row.flag = "--test-knob";
    row.type = SettingType::integer;
    row.description = "a knob this test adds";
    row.minimum = 1;
    row.maximum = 8;
    row.extension_default = std::int64_t{2};
    row.label = "knob{}";
    add_setting(row);
    return true;
  }();
  ASSERT_TRUE(added);
}

using test::CommandResult;
using test::run;

TEST(AddSetting, OneRowReachesFlagsJsonMatrixCriteriaAndSchema) {
  add_the_knob();

  // --help
  const CommandResult help = run({"plan", "--help"});
  EXPECT_NE(help.out.find("--test-knob"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("a knob this test adds (1-8; default 2)"), std::string::npos) << help.out;

  // the plan's JSON, given and defaulted
  const CommandResult given =
      run({"plan", "--model", "qwen2.5-0.5b", "--gpu", "h200", "--test-knob", "3", "--format", "json"});
  ASSERT_EQ(given.code, 0);
  EXPECT_EQ(json::parse(given.out)["setup"]["test_knob"], 3);
  const CommandResult defaulted = run({"plan", "--model", "qwen2.5-0.5b", "--gpu", "h200", "--format", "json"});
  EXPECT_EQ(json::parse(defaulted.out)["setup"]["test_knob"], 2);
  try {
    (void)run({"plan", "--model", "qwen2.5-0.5b", "--gpu", "h200", "--test-knob", "9"});
    ADD_FAILURE() << "out of range accepted";
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "test_knob");
    EXPECT_EQ(e.reason(), "must be between 1 and 8 (got 9)");
  }

  // a bench matrix varies it; configs carry it; labels show it; criteria name it
  const bench::ExperimentPlan plan = bench::parse_experiment_plan(R"(
name = "knob"
[matrix]
model = "qwen2.5-0.5b"
test_knob = [1, 3]
[[criteria]]
where = 'test_knob == 3'
expect = 'status == "ok"'
)",
                                                                  "knob.toml");
  const auto configs = bench::expand_matrix(plan);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(bench::config_to_json(configs[1])["test_knob"], 3);
  EXPECT_NE(configs[1].label.find("knob3"), std::string::npos) << configs[1].label;
  EXPECT_NE(configs[0].key, configs[1].key);
  EXPECT_EQ(bench::config_from_json(bench::config_to_json(configs[1])).key, configs[1].key);
  bench::BenchRow row;
  row.config = configs[1];
  EXPECT_EQ(std::get<double>(bench::row_fields(row).at("test_knob")), 3.0);

  // advise keeps it in the setups it searches and ranks
  const CommandResult advised =
      run({"advise", "--model", "qwen2.5-0.5b", "--gpu", "h200", "--test-knob", "3", "--top", "1", "--format", "json"});
  ASSERT_EQ(advised.code, 0) << advised.out;
  EXPECT_EQ(json::parse(advised.out)["results"][0]["setup"]["test_knob"], 3);

  // the page: a query parameter of its plan, and a field of its form (the schema it reads)
  const serve::Response planned =
      serve::handle({"GET", "/api/plan", {{"model", "qwen2.5-0.5b"}, {"gpu", "h200"}, {"test-knob", "4"}}, ""});
  ASSERT_EQ(planned.status, 200) << planned.body;
  EXPECT_EQ(json::parse(planned.body)["setup"]["test_knob"], 4);
  const serve::Response form = serve::handle({"GET", "/api/schema", {}, ""});
  EXPECT_EQ(json::parse(form.body)["properties"]["test_knob"]["x-flag"], "--test-knob");

  // the schema
  const CommandResult schema = run({"schema"});
  const json knob = json::parse(schema.out)["properties"]["test_knob"];
  EXPECT_EQ(knob["x-flag"], "--test-knob");
  EXPECT_EQ(knob["default"], 2);
  EXPECT_EQ(knob["description"], "a knob this test adds");
  EXPECT_EQ(knob["type"], "integer");
  EXPECT_EQ(knob["maximum"], 8);
}

TEST(AddSetting, KeysAndFlagsAreUnique) {
  add_the_knob();
  Setting again;
  again.key = "rank";
  again.flag = "--another-rank";
  EXPECT_THROW(add_setting(again), InputError);
  again.key = "another";
  again.flag = "--test-knob";
  EXPECT_THROW(add_setting(again), InputError);
  again.flag = "rank";
  EXPECT_THROW(add_setting(again), InputError);
}

}  // namespace
}  // namespace trainfit
