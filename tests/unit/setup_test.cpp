#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "support/plan_args.hpp"
#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

TEST(Setup, ParsesNamesAndRejectsUnknownOnesWithTheValidList) {
  EXPECT_EQ(parse_method("QLoRA"), Method::qlora);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_optimizer("adamw-8bit"), Optimizer::adamw_8bit);
  EXPECT_EQ(parse_attention("eager"), Attention::eager);
  try {
    parse_method("dora");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("full, lora, qlora"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_dtype("int4"), InputError);
}

TEST(Setup, LoraTargetsAcceptShorthandsAndRejectJunk) {
  EXPECT_EQ(parse_lora_targets("all-linear"), std::vector<std::string>{"all-linear"});
  EXPECT_EQ(parse_lora_targets("q, v,q_proj"), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_THROW(parse_lora_targets("q,,v"), InputError);
  EXPECT_THROW(parse_lora_targets("q;rm -rf"), InputError);
}

TEST(Setup, ValidateRejectsImpossibleSetups) {
  TrainingSetup s;
  EXPECT_NO_THROW(validate(s));
  auto bad = [](auto change) {
    TrainingSetup t;
    change(t);
    EXPECT_THROW(validate(t), InputError);
  };
  bad([](TrainingSetup& t) { t.seq = 0; });
  bad([](TrainingSetup& t) { t.seq = -5; });
  bad([](TrainingSetup& t) { t.batch = 1 << 20; });
  bad([](TrainingSetup& t) { t.seq = 1 << 20; t.batch = 1 << 10; });  // tokens overflow guard
  bad([](TrainingSetup& t) { t.grad_accum = 0; });
  bad([](TrainingSetup& t) { t.headroom = 1.0; });
  bad([](TrainingSetup& t) { t.lora.rank = 0; });
  bad([](TrainingSetup& t) { t.lora.dropout = 1.0; });
  bad([](TrainingSetup& t) { t.method = Method::qlora; t.weights = DType::bf16; });
  bad([](TrainingSetup& t) { t.method = Method::lora; t.weights = DType::nf4; });
  bad([](TrainingSetup& t) { t.method = Method::full; t.weights = DType::bf16; t.amp = DType::bf16; });
  bad([](TrainingSetup& t) { t.amp = DType::fp32; });
}

TEST(Setup, BytesPerElement) {
  EXPECT_EQ(bytes_per_element(DType::nf4), 0.5);
  EXPECT_EQ(bytes_per_element(DType::bf16), 2.0);
  EXPECT_EQ(bytes_per_element(DType::fp32), 4.0);
}

TEST(SetupDataParallel, NamesAndLimits) {
  EXPECT_EQ(parse_parallel("FSDP"), Parallel::fsdp);
  EXPECT_EQ(parse_parallel("ddp"), Parallel::ddp);
  EXPECT_THROW(parse_parallel("zero4"), InputError);
  TrainingSetup s;
  s.gpus = 0;
  EXPECT_THROW(validate(s), InputError);
  s.gpus = 2;
  s.parallel = Parallel::fsdp;
  s.method = Method::qlora;
  s.weights = DType::nf4;
  EXPECT_THROW(validate(s), InputError);  // not modelled: says so instead of guessing
  s.parallel = Parallel::ddp;
  EXPECT_NO_THROW(validate(s));
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

using nlohmann::json;

TEST(SettingsTable, EveryRowIsCompleteAndUnique) {
  std::set<std::string> keys, flags;
  for (const Setting& s : settings()) {
    EXPECT_FALSE(s.key.empty());
    EXPECT_EQ(s.flag.rfind("--", 0), 0u) << s.key;
    EXPECT_FALSE(s.description.empty()) << s.key;
    EXPECT_TRUE(s.get && s.set) << s.key;
    EXPECT_TRUE(keys.insert(s.key).second) << s.key;
    EXPECT_TRUE(flags.insert(s.flag).second) << s.flag;
    if (s.type == SettingType::choice) {
      EXPECT_FALSE(s.choices.empty()) << s.key;
      // The default is one of the choices (or none, where none is a value).
      const SettingValue d = s.get(TrainingSetup{});
      EXPECT_NO_THROW(check_setting_value(s, d)) << s.key;
    }
    EXPECT_EQ(find_setting(s.key), &s);
    EXPECT_EQ(find_setting_by_flag(s.flag), &s);
  }
  EXPECT_EQ(find_setting_by_flag("--no-grad-ckpt"), find_setting("grad_ckpt"));
  // The vocabulary the product names.
  for (const char* key : {"model", "method", "weights", "rank", "lora_targets", "lora_dropout", "adapter_dtype",
                          "compute_dtype", "double_quant", "kbit_prepare", "optimizer", "amp", "seq", "batch",
                          "grad_accum", "grad_ckpt", "attn", "gpus", "parallel", "headroom", "platform"})
    EXPECT_NE(find_setting(key), nullptr) << key;
}

TEST(SettingsTable, DefaultsThatDependOnOtherSettings) {
  auto given = [](std::vector<std::pair<const char*, const char*>> kv) {
    std::vector<GivenSetting> g;
    for (const auto& [k, v] : kv) g.emplace_back(find_setting(k), parse_setting_text(*find_setting(k), v));
    return resolve_setup(g);
  };
  EXPECT_EQ(given({{"method", "qlora"}}).weights, DType::nf4);
  EXPECT_EQ(given({{"method", "qlora"}, {"weights", "int8"}}).weights, DType::int8);
  EXPECT_EQ(given({{"method", "full"}}).weights, DType::bf16);
  EXPECT_EQ(given({{"rank", "8"}}).lora.alpha, 16.0);
  EXPECT_EQ(given({{"rank", "8"}, {"lora_alpha", "4"}}).lora.alpha, 4.0);
  // Aliases and shorthands are read into the canonical form.
  EXPECT_EQ(given({{"method", "QLoRA"}, {"weights", "nf4"}}).method, Method::qlora);
  EXPECT_EQ(given({{"lora_targets", "q,v"}}).lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(given({{"amp", "none"}}).amp, std::nullopt);
}

TEST(SettingsTable, ErrorsNameTheSetting) {
  auto reason = [](const char* key, const char* text) {
    try {
      (void)parse_setting_text(*find_setting(key), text);
    } catch (const SettingError& e) {
      EXPECT_EQ(e.setting(), key);
      return e.reason();
    }
    return std::string("no error");
  };
  EXPECT_EQ(reason("seq", "0"), "must be between 1 and 16777216 (got 0)");
  EXPECT_EQ(reason("seq", "99999999999999999999"), "must be between 1 and 16777216 (got 99999999999999999999)");
  EXPECT_EQ(reason("batch", "two"), "'two' is not a whole number");
  EXPECT_EQ(reason("headroom", "1"), "must be in [0, 1) (got 1)");
  EXPECT_EQ(reason("lora_alpha", "0"), "must be greater than 0 (got 0)");
  EXPECT_EQ(reason("lora_dropout", "nan"), "must be in [0, 1) (got nan)");
  EXPECT_EQ(reason("method", "dora"), "unknown value 'dora'; expected one of: full, lora, qlora");
  EXPECT_EQ(reason("adapter_dtype", "nf4"), "unknown value 'nf4'; expected one of: fp32, bf16, fp16");
  EXPECT_EQ(reason("grad_ckpt", "maybe"), "'maybe' is not true or false");
  EXPECT_EQ(reason("vram", "-16GiB").find("vram"), std::string::npos);  // the reason alone
  // A card under 1 GiB is a unit left out: `--vram 24` is 24 bytes.
  EXPECT_EQ(reason("vram", "24"), "must be between 1.0 GiB and 16.0 TiB (got 24, that is 24 bytes; write 24GiB or 24GB)");
  EXPECT_EQ(reason("vram", "512MiB"), "must be between 1.0 GiB and 16.0 TiB (got 512MiB)");
  EXPECT_EQ(reason("vram", "17TiB"), "must be between 1.0 GiB and 16.0 TiB (got 17TiB)");
  EXPECT_EQ(reason("vram", "1GiB"), "no error");
  // Numbers are echoed as written, not as converted.
  EXPECT_EQ(reason("headroom", "9223372036854775808"), "must be in [0, 1) (got 9223372036854775808)");
  EXPECT_EQ(reason("headroom", "-1e400"), "must be in [0, 1) (got -1e400)");
  TrainingSetup s;
  s.method = Method::qlora;
  try {
    validate(s);
    ADD_FAILURE() << "qlora over bf16 accepted";
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "weights");
    EXPECT_EQ(e.reason(), "`method` qlora needs `weights` nf4, fp4 or int8 (got bf16)");
  }
}

TEST(SettingsTable, JsonArgsAndLabelsRoundTrip) {
  std::vector<TrainingSetup> setups(5);
  setups[0].model = "qwen2.5-7b";
  setups[1].model = "llama3.1-8b";
  setups[1].method = Method::qlora;
  setups[1].weights = DType::nf4;
  setups[1].quant.double_quant = false;
  setups[1].quant.kbit_prepare = true;
  setups[1].lora.targets = {"q_proj", "v_proj"};
  setups[1].lora.rank = 64;
  setups[1].lora.alpha = 16;
  setups[2].model = "qwen2.5-0.5b";
  setups[2].method = Method::full;
  setups[2].weights = DType::fp32;
  setups[2].amp = DType::bf16;
  setups[2].gpus = 4;
  setups[2].parallel = Parallel::fsdp;
  setups[2].grad_ckpt = true;
  setups[2].vram_bytes = 24 * kGiB;
  setups[3].model = "mistral-7b";
  setups[3].gpu = "h200";
  setups[3].platform = Platform::on_windows;
  setups[3].headroom = 0.1;
  setups[3].lora.dropout = 0;
  setups[4].model = "qwen2.5-7b";
  setups[4].optimizer = Optimizer::adafactor;
  setups[4].attention = Attention::eager;
  setups[4].grad_accum = 8;
  for (const TrainingSetup& s : setups) {
    validate(s);
    const json j = setup_to_json(s);
    EXPECT_EQ(setup_to_json(setup_from_json(j)), j);
    // The arguments of `trainfit plan` that reproduce it.
    EXPECT_EQ(setup_to_json(testing::setup_from_plan_args(setup_to_args(s))), j);
  }
  // What does not apply is left out; what applies is there.
  const json lora = setup_to_json(setups[0]);
  EXPECT_TRUE(lora.contains("rank") && lora.contains("adapter_dtype"));
  EXPECT_FALSE(lora.contains("double_quant") || lora.contains("parallel") || lora.contains("gpu"));
  const json full = setup_to_json(setups[2]);
  EXPECT_FALSE(full.contains("rank"));
  EXPECT_EQ(full["parallel"], "fsdp");
  EXPECT_EQ(full["vram"], 24 * kGiB);
  EXPECT_EQ(setup_to_args(setups[0]), (std::vector<std::string>{"--model", "qwen2.5-7b"}));
  EXPECT_EQ(setup_label(setups[0]), "qwen2.5-7b lora r16 s512 b1");
  EXPECT_EQ(setup_label(setups[1]), "llama3.1-8b qlora r64 alpha16 q,v no-dq kbit-prepare s512 b1");
  EXPECT_EQ(setup_label(setups[2]), "qwen2.5-0.5b full fp32 amp-bf16 s512 b1 ckpt 4gpus fsdp");
  EXPECT_EQ(setup_label(setups[4]), "qwen2.5-7b lora r16 adafactor eager s512 b1 x8");
}

TEST(SettingsTable, JsonReadingIsStrictAboutTypesAndOptionallyAboutKeys) {
  EXPECT_THROW(setup_from_json(json::array()), InputError);
  EXPECT_THROW(setup_from_json({{"seq", "long"}}), SettingError);
  EXPECT_THROW(setup_from_json({{"seq", 512.5}}), SettingError);
  EXPECT_THROW(setup_from_json({{"grad_ckpt", "yes"}}), SettingError);
  EXPECT_THROW(setup_from_json({{"lora_targets", json::array({1, 2})}}), SettingError);
  EXPECT_NO_THROW(setup_from_json({{"seq", 1024}, {"steps", 4}}));  // other keys ignored by default
  EXPECT_THROW(setup_from_json({{"sqe", 1024}}, [](std::string_view) { return false; }), SettingError);
  EXPECT_EQ(setup_from_json({{"lora_targets", "q,v"}}).lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(setup_from_json({{"lora_targets", {"q", "v"}}}).lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(setup_from_json({{"lora_alpha", nullptr}, {"rank", 4}}).lora.alpha, 8.0);  // null: not given
}

// A number out of range in a file is echoed as the file wrote it: a whole number past 64 bits is
// out of range (not "not a whole number"), and not shown as 9.223372036854776e+18.
TEST(SettingsTable, JsonNumbersOutOfRangeAreEchoedAsWritten) {
  auto reason = [](const std::string& text) {
    try {
      (void)setup_from_json(json::parse(text));
    } catch (const SettingError& e) {
      return e.setting() + ": " + e.reason();
    }
    return std::string("no error");
  };
  EXPECT_EQ(reason(R"({"seq": 9223372036854775808})"), "seq: must be between 1 and 16777216 (got 9223372036854775808)");
  EXPECT_EQ(reason(R"({"seq": -9223372036854775809})"), "seq: must be between 1 and 16777216 (got -9.223372036854776e+18)");
  EXPECT_EQ(reason(R"({"seq": 9223372036854775807})"), "seq: must be between 1 and 16777216 (got 9223372036854775807)");
  EXPECT_EQ(reason(R"({"headroom": 18446744073709551615})"), "headroom: must be in [0, 1) (got 18446744073709551615)");
  EXPECT_EQ(reason(R"({"vram": 24})"), "vram: must be between 1.0 GiB and 16.0 TiB (got 24, that is 24 bytes; write 24GiB or 24GB)");
  EXPECT_EQ(reason(R"({"vram": "24MiB"})"), "vram: must be between 1.0 GiB and 16.0 TiB (got 24MiB)");
  EXPECT_EQ(reason(R"({"seq": 512.5})"), "seq: expected a whole number, not a number");
}

TEST(SettingsTable, DocsListEverySettingWithItsFlag) {
  std::ifstream f(std::string(TRAINFIT_SOURCE_DIR) + "/docs/setup.md");
  ASSERT_TRUE(f);
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const Setting& s : settings()) {
    EXPECT_NE(doc.find("| `" + s.key + "` | `" + s.flag + "`"), std::string::npos) << s.key << " is not in docs/setup.md";
  }
}

TEST(SettingsTable, SchemaHasEveryPropertyWithFlagDefaultAndDescription) {
  const json schema = setup_schema();
  EXPECT_EQ(schema["type"], "object");
  EXPECT_EQ(schema["properties"].size(), settings().size());
  for (const Setting& s : settings()) {
    const json& p = schema["properties"][s.key];
    EXPECT_EQ(p["x-flag"], s.flag);
    EXPECT_TRUE(p.contains("default")) << s.key;
    EXPECT_EQ(p["description"], s.description);
  }
  EXPECT_EQ(schema["properties"]["method"]["enum"], json::array({"full", "lora", "qlora"}));
  EXPECT_EQ(schema["properties"]["seq"]["maximum"], 16777216);
  EXPECT_EQ(schema["properties"]["headroom"]["exclusiveMaximum"], 1);
  EXPECT_EQ(schema["properties"]["weights"]["x-derived-default"]["value"], "nf4");
  EXPECT_EQ(schema["properties"]["weights"]["x-derived-default"]["when"]["one_of"], json::array({"qlora"}));
  EXPECT_EQ(schema["properties"]["lora_alpha"]["x-derived-default"]["times"], "rank");
  EXPECT_EQ(schema["properties"]["rank"]["x-applies-when"]["none_of"], json::array({"full"}));
  EXPECT_EQ(schema["properties"]["amp"]["default"], nullptr);
  EXPECT_FALSE(schema["properties"]["gpu"]["x-matrix"].get<bool>());
}

}  // namespace
}  // namespace trainfit
