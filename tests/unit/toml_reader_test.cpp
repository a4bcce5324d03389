// The one TOML reader of the project's hand-written files: each error names the source, the line
// and the field, and says what was wrong, in the same words whichever file it is.
#include "common/toml_reader.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "trainfit/error.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

// Reads `text` (as card.toml) and hands its field `key` to `get`.
std::string field_error(const std::string& text, const char* key,
                        const std::function<void(const TomlReader&, const toml::node&)>& get) {
  return error_of([&] {
    const toml::table t = parse_toml(text, "card.toml");
    const TomlReader r("card.toml");
    get(r, *t.get(key));
  });
}

TEST(TomlReader, InvalidTomlNamesSourceAndLine) {
  EXPECT_EQ(error_of([] { (void)parse_toml("a = 1\nb = \n", "card.toml"); }).rfind("card.toml:2: invalid TOML: ", 0),
            0u);
  EXPECT_EQ(error_of([] { (void)parse_toml("a = 1\na = 2\n", "x/y.toml"); }).rfind("x/y.toml:2: invalid TOML: ", 0),
            0u);
  EXPECT_EQ(error_of([] { (void)parse_toml("[[[\n", "p.toml"); }).rfind("p.toml:1: invalid TOML: ", 0), 0u);
}

TEST(TomlReader, WrongTypesNameSourceLineFieldAndBothTypes) {
  const std::string text = "# a comment\nname = 7\nlanes = 1.5\nrate = \"fast\"\nsize = true\nlist = [\"a\",\n  2]\n";
  EXPECT_EQ(field_error(text, "name", [](auto& r, auto& n) { (void)r.text(n, "name"); }),
            "card.toml:2: name: expected a string, got an integer");
  EXPECT_EQ(field_error(text, "lanes", [](auto& r, auto& n) { (void)r.integer(n, "lanes"); }),
            "card.toml:3: lanes: expected an integer, got a float");
  EXPECT_EQ(field_error(text, "rate", [](auto& r, auto& n) { (void)r.number(n, "rate"); }),
            "card.toml:4: rate: expected a number, got a string");
  EXPECT_EQ(field_error(text, "size", [](auto& r, auto& n) { (void)r.bytes(n, "size"); }),
            "card.toml:5: size: expected a size such as \"24GiB\" or a byte count, got a boolean");
  EXPECT_EQ(field_error(text, "size", [](auto& r, auto& n) { (void)r.strings(n, "size"); }),
            "card.toml:5: size: expected a string or a list of strings, got a boolean");
  // A list's bad element is named by its own line.
  EXPECT_EQ(field_error(text, "list", [](auto& r, auto& n) { (void)r.strings(n, "list"); }),
            "card.toml:7: list: expected a string, got an integer");
}

// A value out of range is echoed as the file wrote it, so the user can find it.
TEST(TomlReader, RangesSayTheBoundsAndTheValue) {
  const std::string text = "lanes = 12\nrate = 1.5\nzero = 0\nbig = inf\nsize = \"2GiB\"\nbad = \"lots\"\n";
  EXPECT_EQ(field_error(text, "lanes", [](auto& r, auto& n) { (void)r.integer(n, "lanes", 1, 6); }),
            "card.toml:1: lanes: must be between 1 and 6 (got 12)");
  EXPECT_EQ(field_error(text, "rate", [](auto& r, auto& n) { (void)r.number(n, "rate", 0.0, 1.0); }),
            "card.toml:2: rate: must be between 0 and 1 (got 1.5)");
  EXPECT_EQ(field_error(text, "zero", [](auto& r, auto& n) { (void)r.number_above(n, "zero", 0.0, 1.0); }),
            "card.toml:3: zero: must be above 0 and at most 1 (got 0)");
  EXPECT_EQ(field_error(text, "rate", [](auto& r, auto& n) { (void)r.number_above(n, "rate", 0.0, 1.0); }),
            "card.toml:2: rate: must be above 0 and at most 1 (got 1.5)");
  EXPECT_EQ(field_error(text, "big", [](auto& r, auto& n) { (void)r.number(n, "big"); }),
            "card.toml:4: big: must be a finite number");
  EXPECT_EQ(field_error(text, "size", [](auto& r, auto& n) { (void)r.bytes(n, "size", 1, kGiB); }),
            "card.toml:5: size: must be between 1 B and 1.0 GiB (got \"2GiB\")");
  EXPECT_EQ(field_error(text, "bad", [](auto& r, auto& n) { (void)r.bytes(n, "bad"); }),
            "card.toml:6: bad: invalid byte size 'lots': expected a number such as 16GiB");
}

TEST(TomlReader, GoodValues) {
  const toml::table t = parse_toml(
      "name = \"x\"\nlanes = 16\nrate = 0.5\nwhole = 2\nsize = \"16303MiB\"\ncount = 1024\none = \"a\"\nmany = [\"a\", "
      "\"b\"]\n",
      "ok.toml");
  const TomlReader r("ok.toml");
  EXPECT_EQ(r.text(*t.get("name"), "name"), "x");
  EXPECT_EQ(r.integer(*t.get("lanes"), "lanes", 1, 32), 16);
  EXPECT_EQ(r.number(*t.get("rate"), "rate", 0.0, 1.0), 0.5);
  EXPECT_EQ(r.number(*t.get("whole"), "whole"), 2.0);                // an integer is a number too
  EXPECT_EQ(r.number_above(*t.get("rate"), "rate", 0.0, 0.5), 0.5);  // the upper bound is inclusive
  EXPECT_EQ(r.bytes(*t.get("size"), "size"), 16303 * kMiB);
  EXPECT_EQ(r.bytes(*t.get("count"), "count"), 1024);
  EXPECT_EQ(r.strings(*t.get("one"), "one"), std::vector<std::string>{"a"});
  EXPECT_EQ(r.strings(*t.get("many"), "many"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.source(), "ok.toml");
}

TEST(TomlReader, FailWithoutANodeHasNoLine) {
  const TomlReader r("card.toml");
  EXPECT_EQ(error_of([&] { r.fail(nullptr, "memory", "missing"); }), "card.toml: memory: missing");
}

TEST(TomlReader, UnknownFieldsAreNamedWithTheKnownOnes) {
  const toml::table t = parse_toml("name = \"x\"\n\n[run]\nsteps = 3\nstesp = 4\n", "plan.toml");
  const TomlReader r("plan.toml");
  EXPECT_EQ(error_of([&] {
              r.reject_unknown(*t.get("run")->as_table(), "run.", {"steps", "warmup"});
            }),
            "plan.toml:5: run.stesp: unknown field (known: steps, warmup)");
  EXPECT_EQ(error_of([&] { r.reject_unknown(t, "", {"name"}); }).rfind("plan.toml:3: run: unknown field", 0), 0u);
  EXPECT_EQ(error_of([&] { r.reject_unknown(t, "", {"name", "run"}); }), "(accepted)");
}

}  // namespace
}  // namespace trainfit::detail
