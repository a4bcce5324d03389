// trainfit serve's API as a function (no socket): each endpoint answers what the library's own
// calls render for the same setup, and bad requests get a 4xx with a message, never a crash.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/text.hpp"
#include "trainfit/serve.hpp"
#include "trainfit/trace.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::serve {
namespace {

using json = nlohmann::json;
using Query = std::vector<std::pair<std::string, std::string>>;

Response get(const std::string& path, const Query& query = {}) {
  return handle({"GET", path, query, ""});
}
Response post(const std::string& path, const std::string& body) {
  return handle({"POST", path, {}, body});
}

std::string error_of(const Response& r) {
  return json::parse(r.body).at("error").get<std::string>();
}

// What `trainfit plan --format json` prints for these settings, through the library's calls.
std::string plan_json(const std::vector<GivenSetting>& given, bool suggest = true) {
  const TrainingSetup s = resolve_setup(given);
  PlanOptions o;
  o.suggest = suggest;
  return render_plan(make_plan(load_model(s.model), s, resolve_card(s), o), Format::json);
}

GivenSetting text(const char* key, const char* value) {
  const Setting* s = find_setting(key);
  return {s, parse_setting_text(*s, value)};
}

// format=table|markdown|html answers what `trainfit plan --format ...` prints, with its content
// type: the Python package and curl show the command's own text.
TEST(ServeApi, PlanInTheCommandsOtherFormats) {
  const std::vector<GivenSetting> given{text("model", "qwen2.5-7b"), text("gpu", "rtx-4090"), text("method", "qlora")};
  const TrainingSetup s = resolve_setup(given);
  const Plan p = make_plan(load_model(s.model), s, resolve_card(s));
  const std::pair<const char*, const char*> formats[] = {
      {"table", "text/plain; charset=utf-8"}, {"markdown", "text/markdown; charset=utf-8"}, {"html", "text/html; charset=utf-8"}};
  for (const auto& [name, type] : formats) {
    const Response r = get("/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "rtx-4090"}, {"method", "qlora"}, {"format", name}});
    ASSERT_EQ(r.status, 200) << name << ": " << r.body;
    EXPECT_EQ(r.content_type, type);
    EXPECT_EQ(r.body, render_plan(p, parse_report_format(name))) << name;
  }
  const Response table = post("/api/advise", R"({"model": "qwen2.5-7b", "gpu": "rtx-4090", "format": "table"})");
  ASSERT_EQ(table.status, 200) << table.body;
  EXPECT_EQ(table.content_type, "text/plain; charset=utf-8");
  EXPECT_NE(table.body.find("qwen2.5-7b"), std::string::npos) << table.body;
}

TEST(ServeApi, PlanQueryIsWhatPlanPrints) {
  const Response r = get("/api/plan", {{"model", "qwen2.5-7b"},
                                       {"gpu", "rtx-5070-ti"},
                                       {"method", "qlora"},
                                       {"seq", "1024"},
                                       {"lora-targets", "q,v"},
                                       {"grad-ckpt", ""}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, plan_json({text("model", "qwen2.5-7b"),
                               text("gpu", "rtx-5070-ti"),
                               text("method", "qlora"),
                               text("seq", "1024"),
                               text("lora_targets", "q,v"),
                               {find_setting("grad_ckpt"), true}}));
  EXPECT_TRUE(json::parse(r.body).at("setup").at("grad_ckpt").get<bool>());
}

TEST(ServeApi, SwitchOffAndNoSuggest) {
  const Response off =
      get("/api/plan", {{"model", "qwen2.5-14b"}, {"gpu", "rtx-5070-ti"}, {"no-grad-ckpt", ""}, {"no-suggest", ""}});
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(
      off.body,
      plan_json({text("model", "qwen2.5-14b"), text("gpu", "rtx-5070-ti"), {find_setting("grad_ckpt"), false}}, false));
  EXPECT_TRUE(json::parse(off.body).at("suggestions").empty());
  const Response on = get("/api/plan", {{"model", "qwen2.5-14b"}, {"gpu", "rtx-5070-ti"}});
  EXPECT_FALSE(json::parse(on.body).at("suggestions").empty()) << "a 14B full fine-tune cannot fit 16 GB";
}

TEST(ServeApi, PostBodyEqualsQuery) {
  const Response q = get("/api/plan", {{"model", "llama3.1-8b"},
                                       {"gpu", "a100-40gb"},
                                       {"seq", "2048"},
                                       {"batch", "2"},
                                       {"grad-ckpt", "true"},
                                       {"lora-targets", "q,k,v,o"}});
  const Response b = post("/api/plan", R"({"model": "llama3.1-8b", "gpu": "a100-40gb", "seq": 2048, "batch": 2,
                                          "grad_ckpt": true, "lora_targets": ["q", "k", "v", "o"]})");
  ASSERT_EQ(q.status, 200) << q.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(q.body, b.body);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ServeApi, PastedConfigPlansLikeTheBuiltIn) {
  const std::string config = read_file(std::string(TRAINFIT_SOURCE_DIR) + "/data/models/qwen2.5-0.5b.json");
  ASSERT_FALSE(config.empty());
  for (const json& pasted : {json(config), json::parse(config)}) {
    const Response r = post("/api/plan", json{{"config_json", pasted}, {"gpu", "rtx-4090"}, {"seq", 4096}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json builtin =
        json::parse(get("/api/plan", {{"model", "qwen2.5-0.5b"}, {"gpu", "rtx-4090"}, {"seq", "4096"}}).body);
    const json mine = json::parse(r.body);
    EXPECT_EQ(mine.at("setup").at("model"), "config.json");
    EXPECT_EQ(mine.at("memory").at("peak_allocated_bytes"), builtin.at("memory").at("peak_allocated_bytes"));
    EXPECT_EQ(mine.at("verdict"), builtin.at("verdict"));
  }
}

TEST(ServeApi, APastedRecipeIsPlannedAsRecipeFileAndTheBodyOverridesIt) {
  const std::string recipe =
      "model_name_or_path: Qwen/Qwen2.5-7B\nuse_peft: true\ndtype: bfloat16\nper_device_train_batch_size: 2\n"
      "max_length: 2048\nlearning_rate: 2.0e-4\n";
  const Response r = post("/api/plan", json{{"recipe", recipe}, {"gpu", "rtx-4090"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json mine = json::parse(r.body);
  // The same as its settings given one by one: TRL's trainer and defaults.
  const json flags = json::parse(get("/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "rtx-4090"}, {"trainer", "trl"},
                                                   {"method", "lora"}, {"lora-targets", "q,v"}, {"batch", "2"},
                                                   {"seq", "2048"}})
                                     .body);
  EXPECT_EQ(mine.at("memory").at("peak_allocated_bytes"), flags.at("memory").at("peak_allocated_bytes"));
  EXPECT_EQ(mine.at("setup").at("loss"), "chunked");
  bool listed = false;
  for (const auto& w : mine.at("warnings")) listed |= w.get<std::string>().find("ignored: learning_rate") != std::string::npos;
  EXPECT_TRUE(listed) << mine.at("warnings");
  // A setting in the body wins over the recipe's.
  const json batch1 = json::parse(post("/api/plan", json{{"recipe", recipe}, {"gpu", "rtx-4090"}, {"batch", 1}}.dump()).body);
  EXPECT_EQ(batch1.at("setup").at("batch"), 1);
  // A refused key is a 400 that names it; a recipe that is not text is refused too.
  const Response packed =
      post("/api/plan", json{{"recipe", recipe + "completion_only_loss: true\n"}, {"gpu", "rtx-4090"}}.dump());
  EXPECT_EQ(packed.status, 400);
  EXPECT_NE(error_of(packed).find("the pasted recipe: completion_only_loss: a completion-only loss is not planned yet"),
            std::string::npos)
      << error_of(packed);
  EXPECT_EQ(post("/api/plan", json{{"recipe", 7}}.dump()).status, 400);
}

TEST(ServeApi, CatalogueEndpointsAreTheCommandsOutput) {
  EXPECT_EQ(get("/api/schema").body, setup_schema().dump(2) + "\n");
  EXPECT_EQ(get("/api/models").body, render_model_catalog(Format::json));
  EXPECT_EQ(get("/api/gpus").body, render_gpu_catalog(gpu_catalog(), Format::json));
  EXPECT_EQ(get("/api/gpus", {{"x", "1"}}).status, 400);
}

TEST(ServeApi, CurvesMarkTheOutOfMemoryBoundary) {
  const Response r = get("/api/curves", {{"model", "qwen2.5-7b"}, {"gpu", "rtx-5070-ti"}, {"method", "qlora"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body);
  const json& seq = c.at("seq");
  ASSERT_FALSE(seq.at("largest_fitting").is_null());
  const std::int64_t largest = seq.at("largest_fitting").get<std::int64_t>();
  EXPECT_LT(largest, 32768) << "7B QLoRA at 32k tokens without checkpointing cannot fit 16 GB";
  bool over_past_it = false;
  std::int64_t last_peak = 0;
  for (const json& p : seq.at("points")) {
    EXPECT_GT(p.at("peak_allocated_bytes").get<std::int64_t>(), last_peak) << "memory grows with the sequence";
    last_peak = p.at("peak_allocated_bytes").get<std::int64_t>();
    if (p.at("value").get<std::int64_t>() > largest)
      over_past_it = over_past_it || p.at("verdict") == "oom" || p.at("verdict") == "spills";
  }
  EXPECT_TRUE(over_past_it);
  EXPECT_EQ(c.at("capacity_bytes"), find_gpu("rtx-5070-ti").memory_bytes);
}

TEST(ServeApi, AdviseIsWhatAdvisePrints) {
  const Response r =
      get("/api/advise",
          {{"model", "qwen2.5-1.5b"}, {"gpu", "rtx-4090"}, {"seq", "2048"}, {"goal", "largest-batch"}, {"top", "3"}});
  ASSERT_EQ(r.status, 200) << r.body;
  AdviseInputs in;
  in.given = {text("model", "qwen2.5-1.5b"), text("seq", "2048")};
  in.gpu_text = "rtx-4090";
  in.goal = "largest-batch";
  in.top = 3;
  const AdviseRequest request = make_advise_request(in, builtin_prices());
  json expected = json::parse(render_advice(advise(load_model("qwen2.5-1.5b"), request), request, Format::json, false));
  json got = json::parse(r.body);
  expected.erase("seconds");  // the search's own wall time
  got.erase("seconds");
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got.at("results").size(), 3U);
}

TEST(ServeApi, NothingOnTheFileSystemIsReachable) {
  const std::string config = std::string(TRAINFIT_SOURCE_DIR) + "/data/models/qwen2.5-0.5b.json";
  Response r = get("/api/plan", {{"model", config}, {"gpu", "h100-sxm"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("not a built-in name"), std::string::npos) << r.body;
  r = get("/api/plan", {{"model", "qwen2.5-7b"}, {"gpu-spec", "/etc/passwd"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("never reads"), std::string::npos) << r.body;
  r = post("/api/plan", R"({"model": "qwen2.5-7b", "gpu_spec": "/etc/passwd"})");
  EXPECT_EQ(r.status, 400);
  for (const char* path : {"/../etc/passwd", "/etc/passwd", "/%2e%2e/CMakeLists.txt", "/web/app.js", "/api/../api"}) {
    r = get(path);
    EXPECT_EQ(r.status, 404) << path;
  }
  for (const char* param : {"profile", "prices"}) {
    r = get("/api/advise", {{"model", "qwen2.5-7b"}, {param, "/etc/passwd"}});
    EXPECT_EQ(r.status, 400) << param;
    EXPECT_NE(error_of(r).find("unknown parameter"), std::string::npos) << r.body;
  }
}

TEST(ServeApi, PageFilesAreServed) {
  const Response page = get("/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("app.js"), std::string::npos);
  for (const std::string& name : web_asset_names()) EXPECT_EQ(get("/" + name).status, 200) << name;
  EXPECT_EQ(get("/charts.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(handle({"POST", "/", {}, ""}).status, 405);
  EXPECT_EQ(handle({"DELETE", "/api/plan", {}, ""}).status, 405);
  EXPECT_EQ(get("/api/nothing").status, 404);
}

TEST(ServeApi, BadRequestsGetAMessage) {
  struct Case {
    Request request;
    int status;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"POST", "/api/plan", {}, "{\"model\": "}, 400, "not JSON"},
      {{"POST", "/api/plan", {}, "[1, 2]"}, 400, "JSON object"},
      {{"POST", "/api/plan", {}, std::string(300000, ' ')}, 413, "bytes"},
      {{"POST", "/api/plan", {}, std::string(5000, '[') + std::string(5000, ']')}, 400, "nests"},
      {{"POST", "/api/plan", {{"model", "x"}}, "{}"}, 400, "body"},
      {{"POST", "/api/plan", {}, R"({"model": "qwen2.5-7b", "config_json": 7})"}, 400, "config_json"},
      {{"POST", "/api/plan", {}, R"({"config_json": {"model_type": "llama"}})"}, 400, "config.json"},
      {{"POST", "/api/plan", {}, R"({"model": "qwen2.5-7b", "seq": "long"})"}, 400, "seq"},
      {{"POST", "/api/plan", {}, R"({"model": "qwen2.5-7b", "grad_ckpt": "yes"})"}, 400, "true or false"},
      {{"GET", "/api/plan", {{"model", "qwen9-1t"}}, ""}, 400, "unknown model"},
      {{"GET", "/api/plan", {{"gpu", "h100-sxm"}}, ""}, 400, "name the model"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "h100-sxm"}, {"rank", "0"}}, ""}, 400, "rank"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "h100-sxm"}, {"seq", "1"}, {"seq", "2"}}, ""},
       400,
       "twice"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"grad-ckpt", "maybe"}}, ""}, 400, "on or off"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"colour", "red"}}, ""}, 400, "unknown parameter"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"format", "pdf"}}, ""}, 400, "json, table, markdown, html"},
      {{"GET", "/api/curves", {{"model", "qwen2.5-7b"}, {"format", "table"}}, ""}, 400, "JSON only"},
      {{"GET", "/api/plan", {{"model", std::string(5000, 'q')}}, ""}, 400, "bytes"},
      {{"GET", "/api/plan", {{"model", "qwen2.5-7b"}, {"gpu", "no-such-card"}}, ""}, 400, "no-such-card"},
      {{"GET", "/api/advise", {{"model", "qwen2.5-7b"}, {"gpu", "h100-sxm"}, {"top", "many"}}, ""},
       400,
       "whole number"},
      {{"GET", "/api/advise", {{"model", "qwen2.5-7b"}, {"gpu", "h100-sxm"}, {"tokens", "nan"}}, ""}, 400, "finite"},
      {{"GET", "/api/advise", {{"model", "qwen2.5-7b"}, {"gpu", "h100-sxm"}, {"goal", "cheapest"}}, ""}, 400, "tokens"},
      {{"GET",
        "/api/advise",
        {{"model", "qwen2.5-72b"}, {"gpu", "rtx-3060-12gb"}, {"method", "full"}, {"fix", "gpus"}, {"seq", "32768"}},
        ""},
       400,
       "over"},
  };
  for (const Case& c : cases) {
    const Response r = handle(c.request);
    EXPECT_EQ(r.status, c.status) << c.request.path << " " << c.request.body.substr(0, 60) << ": " << r.body;
    ASSERT_NO_THROW(error_of(r)) << r.body;
    EXPECT_NE(error_of(r).find(c.says), std::string::npos) << "expected '" << c.says << "' in: " << r.body;
  }
  Query many;
  for (int i = 0; i < 100; ++i) many.emplace_back("p" + std::to_string(i), "1");
  const Response r = get("/api/plan", many);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("at most 64"), std::string::npos) << r.body;
}

// A body that is not UTF-8: the parser's message quotes the bad bytes, and the answer must still
// be a 400 with a JSON body (the error's dump threw, and the server went down; fuzz_serve_api).
TEST(ServeApi, ABodyThatIsNotUtf8GetsAJsonError) {
  const Response r = post("/api/plan", std::string("{\"model\": \"qwen2.5-0.5b\", \"seq\": \xf1.02}"));
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(nlohmann::json::accept(r.body)) << r.body;
  const Response q = get("/api/plan", {{"model", "qwen\xf1"}, {"gpu", "h200"}});
  EXPECT_EQ(q.status, 400);
  EXPECT_TRUE(nlohmann::json::accept(q.body)) << q.body;
}

// A number past a double's range is not a parse error to nlohmann but out_of_range: still the
// client's mistake, a 400 (it was a 500; fuzz_serve_api).
TEST(ServeApi, ANumberPastADoublesRangeIsABadRequest) {
  const Response r = post("/api/plan", R"({"model": "qwen2.5-0.5b", "gpu": "h200", "seq": 1e643})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("not JSON"), std::string::npos) << r.body;
}

TEST(ServeApi, LargestIsPlanLargest) {
  for (const char* setting : {"batch", "seq"}) {
    const Response r = get("/api/plan", {{"model", "llama3.1-8b"}, {"gpu", "a100-40gb"}, {"method", "lora"},
                                         {"grad-ckpt", ""}, {"largest", setting}});
    ASSERT_EQ(r.status, 200) << r.body;
    const TrainingSetup s = resolve_setup({text("model", "llama3.1-8b"), text("gpu", "a100-40gb"),
                                           text("method", "lora"), text("grad_ckpt", "true")});
    PlanOptions o;
    o.largest = setting;
    const Plan p = make_plan(load_model(s.model), s, resolve_card(s), o);
    ASSERT_TRUE(p.boundary);
    const json b = json::parse(r.body).at("boundary");
    EXPECT_EQ(b.at("largest_at_all"), p.boundary->largest_at_all) << setting;
    EXPECT_EQ(b.at("largest_fits"), p.boundary->largest_fits) << setting;
    EXPECT_GT(p.boundary->largest_at_all, 1) << setting << ": an 8B LoRA with checkpointing runs past 1 on 40 GB";
    EXPECT_GE(p.boundary->largest_at_all, p.boundary->largest_fits);
  }
  EXPECT_EQ(get("/api/plan", {{"model", "qwen2.5-7b"}, {"largest", "grad_accum"}}).status, 400);
}

TEST(ServeApi, APostedSnapshotIsReadAsTraceSnapshotReadsIt) {
  const std::string file = read_file(TRAINFIT_SOURCE_DIR "/data/trace/snapshot/peak.pickle.json");
  ASSERT_GT(file.size(), Limits{}.max_body_bytes) << "larger than any other POST may be";
  const Response alone = post("/api/snapshot", file);
  ASSERT_EQ(alone.status, 200) << alone.body.substr(0, 300);
  EXPECT_EQ(alone.body, trace::render_snapshot(trace::analyse_snapshot_text(file, "the posted snapshot"), nullptr,
                                               Format::json));
  EXPECT_FALSE(json::parse(alone.body).contains("plan"));
  const Response formatted = handle({"POST", "/api/snapshot", {{"format", "json"}}, file});
  EXPECT_EQ(formatted.body, alone.body) << "format alone is no setup";
  // With a setup in the query, its plan is set beside the snapshot.
  const Response beside = handle({"POST", "/api/snapshot", {{"model", "qwen2.5-0.5b"}, {"gpu", "h200"}}, file});
  ASSERT_EQ(beside.status, 200) << beside.body.substr(0, 300);
  const json plan = json::parse(beside.body).at("plan");
  bool peak = false;
  for (const json& row : plan.at("memory")) peak = peak || row.at("term") == "peak_allocated";
  EXPECT_TRUE(peak) << plan.dump();
}

TEST(ServeApi, ABadSnapshotGetsAMessage) {
  const std::string gz = read_file(TRAINFIT_SOURCE_DIR "/data/bench/h200-boundary-2026-12-05/snapshots/"
                                                       "l8b-lora-ckpt-40g-batch7.pickle.gz");
  ASSERT_GT(gz.size(), 2u);
  struct Case {
    Request request;
    int status;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"POST", "/api/snapshot", {}, ""}, 400, "POST the snapshot file"},
      {{"POST", "/api/snapshot", {}, gz}, 400, "gzipped"},
      {{"POST", "/api/snapshot", {}, "not a snapshot at all"}, 400, "snapshot"},
      {{"POST", "/api/snapshot", {{"model", "qwen9-1t"}}, read_file(TRAINFIT_SOURCE_DIR
                                                                    "/data/trace/snapshot/peak.pickle.json")},
       400, "unknown model"},
      {{"GET", "/api/snapshot", {}, ""}, 405, "POST"},
      {{"POST", "/api/snapshot", {{"format", "table"}}, "{}"}, 400, "JSON only"},
  };
  for (const Case& c : cases) {
    const Response r = handle(c.request);
    EXPECT_EQ(r.status, c.status) << c.request.method << " " << c.request.body.substr(0, 40);
    EXPECT_NE(error_of(r).find(c.says), std::string::npos) << error_of(r);
  }
  Limits small;
  small.max_snapshot_bytes = 1000;
  const Response r = handle({"POST", "/api/snapshot", {}, std::string(1001, '{')}, small);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(error_of(r).find("at most 1000"), std::string::npos) << error_of(r);
}

TEST(HtmlReport, IsOnePageWithItsDataAndCharts) {
  const TrainingSetup s = resolve_setup({text("model", "qwen2.5-7b"), text("gpu", "rtx-5070-ti")});
  const Plan p = make_plan(load_model(s.model), s, resolve_card(s));
  const std::string page = render_plan(p, Format::html);
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0U);
  EXPECT_NE(page.find("TrainfitCharts.renderReport(\"plan\""), std::string::npos);
  EXPECT_NE(page.find(std::to_string(p.memory.peak_allocated_bytes)), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos) << "self-contained: no script is fetched";
  EXPECT_EQ(page.find("<link"), std::string::npos) << "self-contained: no stylesheet is fetched";
  // Nothing names another site to load (the SVG namespace URI is a name, never fetched).
  for (const char* loads : {"src=\"http", "href=\"http", "@import", "url(", "fetch("})
    EXPECT_EQ(page.find(loads), std::string::npos) << loads;
}

TEST(HtmlReport, DataCannotEndItsScript) {
  const std::string page =
      render_html_report("plan", "a <b> & \"c\"", {{"evil", "</script><script>alert(1)</script>"}});
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(page.find("\\u003c/script>"), std::string::npos);
  EXPECT_NE(page.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  // The embedded code itself must not hold what would end its element.
  for (const char* name : {"charts.js", "style.css"}) {
    EXPECT_FALSE(web_asset(name).empty()) << name;
    EXPECT_EQ(web_asset(name).find("</script"), std::string::npos) << name;
    EXPECT_EQ(web_asset(name).find("</style"), std::string::npos) << name;
  }
}

// The page arrives with the summary of the setup its address names, drawn by the server, so that a
// shared link reads without scripts; the no-script form's empty fields take their defaults, and a
// setup that cannot be planned says why in the page instead of failing it.
TEST(ServePage, CarriesTheSummaryOfItsSetup) {
  const Plan p = make_plan(load_model("qwen2.5-1.5b"), [] {
    TrainingSetup s;
    s.gpu = "h100-sxm";
    s.seq = 1024;
    return s;
  }(), find_gpu("h100-sxm"));
  const Response page = get("/", {{"model", "qwen2.5-1.5b"}, {"gpu", "h100-sxm"}, {"seq", "1024"}, {"batch", ""}});
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find(fmt::format("id=\"peak-allocated\">{:.2f} GiB<", static_cast<double>(p.memory.peak_allocated_bytes) / kGiB)),
            std::string::npos);
  EXPECT_NE(page.body.find(detail::html_escaped(plan_to_json(p).at("summary").get<std::string>())), std::string::npos);
  // No setup named: the starting one, whose address the page's script reads from the page.
  const Response start = get("/", {});
  EXPECT_NE(start.body.find("data-setup=\"model=qwen2.5-7b&amp;gpu=rtx-5070-ti\""), std::string::npos);
  EXPECT_NE(start.body.find("id=\"verdict\""), std::string::npos);
  const Response bad = get("/", {{"model", "qwen9-1t"}});
  EXPECT_EQ(bad.status, 200);
  EXPECT_NE(bad.body.find("<p class=\"error\">unknown model"), std::string::npos) << bad.body.substr(0, 400);
  const Response words = get("/words.js", {});
  EXPECT_EQ(words.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(words.body.find("\"logits_and_loss\":\"logits and loss\""), std::string::npos);
}

TEST(HtmlReport, ReportFormatIsOnlyForReports) {
  EXPECT_EQ(parse_report_format("html"), Format::html);
  EXPECT_EQ(parse_report_format("json"), Format::json);
  EXPECT_THROW(parse_format("html"), InputError);
  EXPECT_THROW(parse_report_format("pdf"), InputError);
}

// Any byte in a value keeps the error whole (a NUL used to end it where a C string would: "seq:
// '1"), and a value is quoted by a short prefix, not echoed back whole (a 200 KiB model name was).
TEST(ServeApi, ErrorsQuoteAShortPrintablePrefixOfAnyValue) {
  const Response nul = get("/api/plan", {{"model", "qwen2.5-0.5b"}, {"gpu", "h200"}, {"seq", std::string("1\0x", 3)}});
  EXPECT_EQ(nul.status, 400);
  EXPECT_NE(error_of(nul).find("'1\\x00x' is not a whole number"), std::string::npos) << error_of(nul);
  const Response huge = post("/api/plan", R"({"gpu": "h200", "model": ")" + std::string(200 * 1024, 'q') + "\"}");
  EXPECT_EQ(huge.status, 400);
  EXPECT_LT(huge.body.size(), 2000U) << huge.body.substr(0, 300);
  EXPECT_NE(error_of(huge).find("... (204800 bytes)"), std::string::npos) << error_of(huge).substr(0, 300);
  const Response card = get("/api/plan", {{"model", "qwen2.5-0.5b"}, {"gpu", std::string(100000, 'x') + "\x1b[2J"}});
  EXPECT_EQ(card.status, 400);
  EXPECT_LT(card.body.size(), 4000U);
  EXPECT_EQ(card.body.find("\x1b"), std::string::npos);
}

// A setting given that does not apply to the setup is named in the plan's warnings, through the
// API as on the command line (both print the same JSON).
TEST(ServeApi, ASettingThatDoesNotApplyIsNamed) {
  const Response r = get("/api/plan", {{"model", "qwen2.5-0.5b"}, {"gpu", "h200"}, {"gpus", "1"}, {"nodes", "4096"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json warnings = json::parse(r.body).at("warnings");
  bool named = false;
  for (const json& w : warnings)
    named |= w.get<std::string>() == "--nodes is ignored: it applies only when --gpus is at least 2";
  EXPECT_TRUE(named) << warnings.dump();
}

}  // namespace
}  // namespace trainfit::serve
