// Adding a model family is one row of the families table (model/families.cpp): the test adds a
// family that reads as Llama and names its modules otherwise, and a built-in model of it, and finds
// both in `trainfit models`, plan, LoRA targeting, advise, `trainfit schema` and the web page's API,
// with no other code touched. In its own binary: the rows stay for the rest of the process.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "extension/command_line.hpp"
#include "trainfit/error.hpp"
#include "trainfit/model.hpp"
#include "trainfit/serve.hpp"

namespace trainfit {
namespace {

using nlohmann::json;
using test::run;

// A small Llama, once as the test family and once as Llama itself.
std::string tiny_config(const char* model_type) {
  return json{{"model_type", model_type}, {"hidden_size", 256},
              {"num_hidden_layers", 2},   {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"intermediate_size", 512},
              {"vocab_size", 1000},       {"max_position_embeddings", 4096}}
      .dump();
}

void add_the_family() {
  static const bool added = [] {
    using R = ModuleRole;
    ModelFamily f;
    f.model_type = "test_llama";
    f.reads_as = "llama";
    f.renamed = {{R::attention_query, "wq"},  {R::attention_key, "wk"}, {R::attention_value, "wv"},
                 {R::attention_output, "wo"}, {R::mlp_gate, "w1"},      {R::mlp_up, "w3"},
                 {R::mlp_down, "w2"}};
    add_model_family(f);
    add_builtin_model("test-llama-tiny", tiny_config("test_llama"), {"test-org/Test-Llama-Tiny"});
    return true;
  }();
  ASSERT_TRUE(added);
}

json plan_of(const std::vector<std::string>& args) {
  const test::CommandResult r = run(args);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out);
}

TEST(AddFamily, OneRowReachesModelsPlanTargetsAdviseSchemaAndThePage) {
  add_the_family();

  // trainfit models lists it, with its modules by role.
  const json models = json::parse(run({"models", "--format", "json"}).out);
  json listed;
  for (const json& m : models)
    if (m["name"] == "test-llama-tiny") listed = m;
  ASSERT_FALSE(listed.is_null()) << models.dump();
  EXPECT_EQ(listed["model_type"], "test_llama");
  EXPECT_EQ(listed["modules"]["attention_query"], "wq");
  EXPECT_EQ(listed["modules"]["mlp_down"], "w2");

  // It plans as the Llama of the same shape does, by its name and by its Hub id, and its LoRA
  // targets are its own names.
  const std::string dir = ::testing::TempDir();
  const std::string as_llama = dir + "/tiny_llama_config.json";
  {
    std::FILE* f = std::fopen(as_llama.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text = tiny_config("llama");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  const json ours =
      plan_of({"plan", "--model", "test-llama-tiny", "--gpu", "h200", "--lora-targets", "wq,wv", "--format", "json"});
  const json llama =
      plan_of({"plan", "--model", as_llama, "--gpu", "h200", "--lora-targets", "q,v", "--format", "json"});
  EXPECT_EQ(ours["memory"], llama["memory"]);
  EXPECT_EQ(ours["time"], llama["time"]);
  EXPECT_EQ(ours["verdict"], llama["verdict"]);
  EXPECT_GT(ours["memory"]["peak_allocated_bytes"].get<double>(), 0.0);
  const json by_id = plan_of({"plan", "--model", "Test-Org/test-llama-tiny", "--gpu", "h200", "--format", "json"});
  EXPECT_EQ(by_id["model"]["name"], "test-llama-tiny");
  try {
    (void)run({"plan", "--model", "test-llama-tiny", "--gpu", "h200", "--lora-targets", "q,v"});
    ADD_FAILURE() << "Llama's names accepted for a family that names its modules otherwise";
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "lora_targets");
    EXPECT_NE(std::string(e.what()).find("wq"), std::string::npos) << e.what();
  }

  // advise searches it.
  const test::CommandResult advice =
      run({"advise", "--model", "test-llama-tiny", "--gpu", "h200", "--top", "1", "--format", "json"});
  ASSERT_EQ(advice.code, 0) << advice.out;
  EXPECT_EQ(json::parse(advice.out)["results"][0]["setup"]["model"], "test-llama-tiny");

  // The schema names its modules for the runner.
  const json schema = json::parse(run({"schema"}).out);
  EXPECT_EQ(schema["x-module-names"]["test_llama"]["attention_output"], "wo");
  EXPECT_EQ(schema["x-module-names"]["llama"]["attention_output"], "o_proj");

  // The page: its model list and its plan.
  const serve::Response listed_on_page = serve::handle({"GET", "/api/models", {}, ""});
  ASSERT_EQ(listed_on_page.status, 200);
  EXPECT_NE(listed_on_page.body.find("\"test-llama-tiny\""), std::string::npos);
  const serve::Response planned_on_page =
      serve::handle({"GET", "/api/plan", {{"model", "test-llama-tiny"}, {"gpu", "h200"}}, ""});
  ASSERT_EQ(planned_on_page.status, 200) << planned_on_page.body;
  EXPECT_EQ(json::parse(planned_on_page.body)["model"]["model_type"], "test_llama");
}

TEST(AddFamily, AFamilyReadsAsABuiltInAndTakesNoTakenName) {
  add_the_family();
  ModelFamily again;
  again.model_type = "llama";
  again.reads_as = "llama";
  EXPECT_THROW(add_model_family(again), InputError);
  again.model_type = "another_family";
  again.reads_as = "test_llama";  // not a built-in: it has no reading code of its own
  EXPECT_THROW(add_model_family(again), InputError);
  again.reads_as = "no_such_family";
  EXPECT_THROW(add_model_family(again), InputError);
  EXPECT_THROW(add_builtin_model("test-llama-tiny", tiny_config("test_llama")), InputError);
  EXPECT_THROW(add_builtin_model("qwen2.5-7b", tiny_config("llama")), InputError);
  EXPECT_THROW(add_builtin_model("unknown-family-model", tiny_config("no_such_family")), InputError);
}

}  // namespace
}  // namespace trainfit
