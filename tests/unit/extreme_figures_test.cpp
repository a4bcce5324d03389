// Figures that cannot wrap: a setup far past every card (a sequence of millions of tokens under
// eager attention, 65,536 sequences a micro-batch) is an "oom" with a figure of the right sign and
// magnitude, never a negative byte count, a non-finite time, or "fits" (issue 39: a 70B DPO step
// at 14M tokens printed a peak of -8 EiB and "fits").
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "support/plan_args.hpp"
#include "trainfit/advise.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/prices.hpp"
#include "trainfit/report.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

// Every number of a rendered plan or advice: finite (nlohmann writes inf and NaN as null, so a
// null where a number was is caught by the typed checks below) and, for a byte count, not negative.
void expect_sane_json(const json& j, const std::string& where, const std::string& key = "") {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) expect_sane_json(v, where, k);
  } else if (j.is_array()) {
    for (const json& v : j) expect_sane_json(v, where, key);
  } else if (j.is_number_float()) {
    EXPECT_TRUE(std::isfinite(j.get<double>())) << key << " in " << where;
  } else if (j.is_number_integer() && key.find("bytes") != std::string::npos) {
    EXPECT_GE(j.get<std::int64_t>(), 0) << key << " in " << where;
  }
}

// A minus sign before a figure in the text ("peak -8589934592.00 GiB").
const std::regex& negative_figure() {
  static const std::regex re(R"((^|[ (:])-[0-9])");
  return re;
}

// The checks every plan must pass, whatever its setup.
void expect_sane_plan(const Plan& p, const std::string& where) {
  const MemoryEstimate& m = p.memory;
  for (const std::int64_t v :
       {m.peak_allocated_bytes, m.peak_reserved_bytes, m.device_used_bytes, m.busiest_peak_allocated_bytes,
        m.busiest_device_used_bytes, m.host_bytes, p.over_capacity_bytes})
    EXPECT_GE(v, 0) << where;
  for (const auto& part : m.breakdown) EXPECT_GE(part.bytes, 0) << part.category << " " << where;
  for (const auto& phase : m.phases) EXPECT_GE(phase.allocated_bytes, 0) << where;
  EXPECT_GE(m.peak_reserved_bytes, m.peak_allocated_bytes) << where;
  EXPECT_GE(m.device_used_bytes, m.peak_reserved_bytes) << where;
  const std::int64_t cap = p.gpu.memory_bytes;
  if (m.busiest_peak_allocated_bytes > cap || m.busiest_device_used_bytes > cap) {
    EXPECT_TRUE(p.verdict == Verdict::oom || p.verdict == Verdict::spills) << to_string(p.verdict) << " " << where;
    EXPECT_GT(p.over_capacity_bytes, 0) << where;
  }
  EXPECT_TRUE(std::isfinite(p.headroom_fraction)) << where;
  if (p.time.predicted) {
    EXPECT_TRUE(std::isfinite(p.time.step_seconds) && p.time.step_seconds > 0) << p.time.step_seconds << " " << where;
    EXPECT_TRUE(std::isfinite(p.time.tokens_per_second) && p.time.tokens_per_second >= 0) << where;
  }
  expect_sane_json(json::parse(render_plan(p, Format::json)), where);
  const std::string text = render_plan(p, Format::table);
  EXPECT_FALSE(std::regex_search(text, negative_figure())) << where << "\n" << text;
}

std::vector<std::string> objectives() {
  return find_setting("objective")->choices;
}

// Every built-in model at the largest sequence and micro-batch the flags take, under every
// objective, both attentions, and each kind of layout: every figure non-negative and the verdict
// an OOM (no card holds 2^24 tokens x 65,536 sequences).
TEST(ExtremeFigures, EveryBuiltinModelAtTheLargestSequenceAndBatch) {
  // A micro-batch holds at most as many tokens as the longest sequence (validate): the longest
  // sequence alone, and the largest micro-batch of the sequences that fill it; the most
  // accumulation steps with either.
  const auto most = [](const char* key) { return static_cast<std::int64_t>(*find_setting(key)->maximum); };
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {most("seq"), 1}, {most("seq") / 2, 2}, {most("seq") / most("batch"), most("batch")}};
  const std::string accum = fmt::format("{}", most("grad_accum"));
  const std::vector<std::vector<std::string>> layouts = {
      {},
      {"--gpus", "8"},
      {"--gpus", "8", "--parallel", "fsdp"},
      {"--gpus", "8", "--parallel", "zero3"},
      {"--gpus", "8", "--tp", "2"},
      {"--gpus", "8", "--pp", "4"},
      {"--gpus", "64", "--nodes", "8", "--tp", "2", "--pp", "2", "--parallel", "fsdp"},
  };
  PlanOptions options;
  options.suggest = false;
  std::size_t planned = 0, refused = 0;
  std::map<std::string, std::size_t> why_refused;
  for (const std::string& model : builtin_model_names()) {
    const ModelSpec spec = load_model(model);
    for (const std::string& objective : objectives()) {
      for (const char* attn : {"sdpa", "eager"}) {
        for (const char* method : {"full", "lora"}) {
          for (const auto& layout : layouts) {
            for (const auto& [seq, batch] : shapes) {
              std::vector<std::string> args = {"--model",      model,
                                               "--gpu",        "h200",
                                               "--seq",        fmt::format("{}", seq),
                                               "--batch",      fmt::format("{}", batch),
                                               "--grad-accum", accum,
                                               "--method",     method,
                                               "--objective",  objective,
                                               "--attn",       attn};
              args.insert(args.end(), layout.begin(), layout.end());
              const std::string where = plan_command(args);
              TrainingSetup setup;
              Plan p;
              try {
                setup = testing::setup_from_plan_args(args);
                p = make_plan(spec, setup, resolve_card(setup), options);
              } catch (const InputError& e) {
                ++refused;  // a combination the settings refuse (kto at batch 1, tp past the heads...)
                ++why_refused[std::string(e.what()).substr(0, 60)];
                continue;
              }
              ++planned;
              expect_sane_plan(p, where);
              EXPECT_EQ(p.verdict, Verdict::oom) << where;
              ASSERT_FALSE(::testing::Test::HasFailure()) << where;
            }
          }
        }
      }
    }
  }
  std::string reasons;
  for (const auto& [why, n] : why_refused) reasons += fmt::format("  {} x {}\n", n, why);
  std::printf("%zu planned, %zu refused:\n%s", planned, refused, reasons.c_str());
  // A test that refused every setup would check nothing.
  EXPECT_GT(planned, 5000U) << reasons;
}

TEST(ExtremeFigures, TheIssuesSetupIsAnOomOfMoreThanEightEiB) {
  const TrainingSetup setup =
      testing::setup_from_plan_args({"--model", "llama3.1-70b", "--gpu", "h200", "--method", "lora", "--attn", "eager",
                                     "--seq", "14000000", "--objective", "dpo"});
  PlanOptions options;
  options.suggest = false;
  const Plan p = make_plan(load_model(setup.model), setup, resolve_card(setup), options);
  EXPECT_EQ(p.verdict, Verdict::oom);
  EXPECT_EQ(p.memory.peak_allocated_bytes, kMostBytes);
  EXPECT_EQ(p.over_capacity_bytes, kMostBytes);  // at least 8 EiB over too
  const std::string text = render_plan(p, Format::table);
  EXPECT_NE(text.find("more than 8 EiB"), std::string::npos) << text;
  expect_sane_plan(p, "the issue's setup");
}

TEST(ExtremeFigures, CountsPastInt64AreHeldAtTheTop) {
  EXPECT_EQ(count_of(0x1p63), kMostBytes);
  EXPECT_EQ(count_of(1e300), kMostBytes);
  EXPECT_EQ(count_of(HUGE_VAL), kMostBytes);
  EXPECT_EQ(count_of(-5.0), 0);
  EXPECT_EQ(count_of(-HUGE_VAL), 0);
  EXPECT_EQ(count_of(0x1p62), std::int64_t{1} << 62);
  EXPECT_THROW(count_of(std::nan("")), std::domain_error);
  EXPECT_EQ(add_bytes(kMostBytes, 1), kMostBytes);
  EXPECT_EQ(add_bytes(kMostBytes - 10, 20), kMostBytes);
  EXPECT_EQ(add_bytes(3, 4), 7);
  EXPECT_EQ(format_bytes(kMostBytes), "more than 8 EiB");
  EXPECT_EQ(format_bytes(std::int64_t{3} << 60), "3.0 EiB");
}

// A value for a setting drawn towards its extremes: the bounds, a bound's neighbour, or anywhere
// between; a choice at random; a boolean either way.
std::string extreme_value(const Setting& s, std::mt19937_64& rng) {
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  switch (s.type) {
    case SettingType::boolean:
      return pick(2) == 0 ? "on" : "off";
    case SettingType::choice:
      return s.choices.empty() ? std::string() : s.choices[pick(s.choices.size())];
    case SettingType::integer:
    case SettingType::bytes:
    case SettingType::number: {
      const double lo = s.minimum ? *s.minimum : 0.0, hi = s.maximum ? *s.maximum : 1e6;
      double v = 0;
      switch (pick(5)) {
        case 0:
          v = lo;
          break;
        case 1:
          v = hi;
          break;
        case 2:
          v = std::nextafter(hi, lo);
          break;
        case 3:
          v = lo + (hi - lo) * std::uniform_real_distribution<double>(0, 1)(rng);
          break;
        default:
          v = std::exp2(std::uniform_real_distribution<double>(0, std::log2(std::max(hi, 2.0)))(rng));
          break;
      }
      if (s.exclusive_minimum && v <= lo) v = std::nextafter(lo, hi);
      if (s.exclusive_maximum && v >= hi) v = std::nextafter(hi, lo);
      if (s.type == SettingType::number) return fmt::format("{}", v);
      return fmt::format("{}", static_cast<std::int64_t>(std::clamp(std::floor(v), lo, hi)));
    }
    default:
      return {};
  }
}

// How many plan and advise invocations the random search runs (draws the settings refuse do not
// count): 5,000 in the test run; the 100,000 of issue 39 with TRAINFIT_EXTREME_DRAWS=100000
// (docs/model.md, "Verdicts").
std::size_t draws() {
  const char* env = std::getenv("TRAINFIT_EXTREME_DRAWS");
  return env != nullptr ? static_cast<std::size_t>(std::strtoull(env, nullptr, 10)) : 5000;
}

// Random setups with each setting drawn towards its extremes, planned and (one in ten) advised:
// no negative, wrapped or non-finite figure, and no "fits" past the card.
TEST(ExtremeFigures, RandomExtremePlansAndAdviceNeverWrap) {
  std::mt19937_64 rng(20261205);
  const std::vector<std::string> models = builtin_model_names();
  std::vector<std::string> cards;
  for (const GpuSpec& g : gpu_catalog()) cards.push_back(g.id);
  const std::size_t n = draws();
  std::size_t planned = 0, advised = 0, refused = 0, drawn = 0;
  for (std::size_t i = 0; planned + advised < n && i < 20 * n; ++i) {
    ++drawn;
    std::vector<std::string> args = {"--model", models[rng() % models.size()], "--gpu", cards[rng() % cards.size()]};
    for (const Setting& s : settings()) {
      if (s.key == "model" || s.key == "gpu" || s.flag.empty() || rng() % 3 != 0) continue;
      const std::string v = extreme_value(s, rng);
      if (v.empty()) continue;
      if (s.type == SettingType::boolean) {
        args.push_back(v == "on" ? s.flag : "--no-" + s.flag.substr(2));
      } else {
        args.push_back(s.flag);
        args.push_back(v);
      }
    }
    const std::string where = plan_command(args);
    TrainingSetup setup;
    try {
      setup = testing::setup_from_plan_args(args);
    } catch (const InputError&) {
      ++refused;  // a draw the settings refuse (a vram with a card, a layout past the model...)
      continue;
    } catch (const std::runtime_error&) {
      ++refused;  // a flag this draw spelled as no plan flag
      continue;
    }
    try {
      PlanOptions options;
      options.suggest = i % 20 == 0;  // the search for what fits runs too, now and then
      const ModelSpec model = load_model(setup.model);
      const Plan p = make_plan(model, setup, resolve_card(setup), options);
      ++planned;
      expect_sane_plan(p, where);
      for (const Suggestion& s : p.suggestions) EXPECT_GE(s.peak_allocated_bytes, 0) << where;
      if (i % 10 == 0) {
        AdviseRequest r;
        r.base = setup;
        r.free = {"batch", "grad_accum", "grad_ckpt"};
        r.tokens_per_step = static_cast<std::int64_t>(rng() % 3 == 0 ? rng() >> 1 : rng() % (1 << 24));
        r.tokens = 1e12;
        r.prices = &builtin_prices();
        try {
          const Advice a = advise(model, r);
          ++advised;
          for (const AdvisedSetup& s : a.results) {
            EXPECT_GE(s.peak_allocated_bytes, 0) << where;
            EXPECT_LE(s.peak_allocated_bytes, s.gpu.memory_bytes) << "advised past the card: " << where;
            EXPECT_NE(s.verdict, Verdict::oom) << where;
            EXPECT_TRUE(std::isfinite(s.step_seconds) && std::isfinite(s.hours)) << where;
          }
          EXPECT_GE(a.nearest_over_bytes, 0) << where;
          expect_sane_json(json::parse(render_advice(a, r, Format::json, false)), where);
        } catch (const InputError&) {
          ++refused;  // nothing to search for this draw
        }
      }
    } catch (const InputError&) {
      ++refused;
    }
    ASSERT_FALSE(::testing::Test::HasFailure()) << where;
  }
  EXPECT_GE(planned + advised, n) << planned << " planned, " << refused << " refused";
  EXPECT_GT(advised, n / 20);
  std::printf("random extremes: %zu draws, %zu plans, %zu advice searches, %zu refused as invalid\n", drawn, planned,
              advised, refused);
}

}  // namespace
}  // namespace trainfit
