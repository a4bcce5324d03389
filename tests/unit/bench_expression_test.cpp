// The criteria language of experiment plans.
#include <gtest/gtest.h>

#include <string>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace trainfit::bench {
namespace {

Value eval(const std::string& text, const Fields& row = {}) { return Expression::parse(text).evaluate(&row).value; }

std::string error_of(const std::string& text) {
  try {
    (void)Expression::parse(text, [](std::string_view f) { return is_row_field(f); });
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BenchExpression, ArithmeticPrecedenceAndUnits) {
  EXPECT_EQ(eval("1 + 2 * 3"), Value{7.0});
  EXPECT_EQ(eval("(1 + 2) * 3"), Value{9.0});
  EXPECT_EQ(eval("-2 * -3 - 1"), Value{5.0});
  EXPECT_EQ(eval("10 / 4"), Value{2.5});
  EXPECT_EQ(eval("16GiB"), Value{16384.0});  // memory is in MiB
  EXPECT_EQ(eval("512KiB + 1MiB"), Value{1.5});
  EXPECT_EQ(eval("1e3"), Value{1000.0});
  EXPECT_EQ(eval("1 / 0"), Value{});  // no infinity: null
}

TEST(BenchExpression, ComparisonsAndLogic) {
  const Fields row = {{"peak_allocated", 11897.9}, {"vram", 16303.0}, {"status", std::string("ok")},
                      {"grad_ckpt", true}};
  EXPECT_EQ(eval("peak_allocated <= 0.8 * vram and status == \"ok\"", row), Value{true});
  EXPECT_EQ(eval("peak_allocated <= 0.7 * vram or status == 'oom'", row), Value{false});
  EXPECT_EQ(eval("not grad_ckpt", row), Value{false});
  EXPECT_EQ(eval("status != 'ok' or (grad_ckpt and vram > 16000)", row), Value{true});
  EXPECT_EQ(eval("'a' < 'b'"), Value{true});
}

TEST(BenchExpression, NullIsNeitherTrueNorFalse) {
  const Fields row = {{"peak_allocated", Value{}}, {"status", std::string("crashed")}};
  EXPECT_EQ(eval("peak_allocated < 100", row), Value{false});
  EXPECT_EQ(eval("peak_allocated > 100", row), Value{false});
  EXPECT_EQ(eval("peak_allocated == null", row), Value{true});
  EXPECT_EQ(eval("peak_allocated + 1", row), Value{});
  EXPECT_EQ(eval("missing_field == null", row), Value{true});  // unchecked parse: absent is null
}

TEST(BenchExpression, AggregatesPickTheirRows) {
  const std::vector<Fields> rows = {
      {{"params_b", 1.5}, {"grad_ckpt", false}, {"verdict", std::string("fits")}},
      {{"params_b", 1.5}, {"grad_ckpt", true}, {"verdict", std::string("fits")}},
      {{"params_b", 7.6}, {"grad_ckpt", false}, {"verdict", std::string("fits")}},
      {{"params_b", 7.6}, {"grad_ckpt", true}, {"verdict", std::string("fits")}},
      {{"params_b", 14.8}, {"grad_ckpt", false}, {"verdict", std::string("spilled")}},
      {{"params_b", 14.8}, {"grad_ckpt", true}, {"verdict", std::string("spilled")}},
  };
  const auto e = Expression::parse(
      "max(params_b, grad_ckpt and verdict == 'fits') > max(params_b, not grad_ckpt and verdict == 'fits')");
  EXPECT_TRUE(e.has_aggregates());
  EXPECT_FALSE(e.uses_row_fields());
  const Evaluation r = e.evaluate(nullptr, &rows);
  EXPECT_EQ(r.value, Value{false});
  EXPECT_EQ(r.rows, (std::vector<std::size_t>{2, 3}));  // the two argmax rows
  EXPECT_EQ(Expression::parse("count(verdict == 'spilled')").evaluate(nullptr, &rows).value, Value{2.0});
  EXPECT_EQ(Expression::parse("all(params_b > 1)").evaluate(nullptr, &rows).value, Value{true});
  const Evaluation broken = Expression::parse("all(verdict == 'fits')").evaluate(nullptr, &rows);
  EXPECT_EQ(broken.value, Value{false});
  EXPECT_EQ(broken.rows, (std::vector<std::size_t>{4, 5}));  // the rows that break it
  EXPECT_EQ(Expression::parse("mean(params_b, grad_ckpt)").evaluate(nullptr, &rows).value, Value{(1.5 + 7.6 + 14.8) / 3});
  EXPECT_EQ(Expression::parse("max(params_b, verdict == 'oom')").evaluate(nullptr, &rows).value, Value{});
}

TEST(BenchExpression, ClearErrorsWithTheColumn) {
  EXPECT_NE(error_of("peak_allocated <= 0.8 * ").find("column 25"), std::string::npos) << error_of("peak_allocated <= 0.8 * ");
  EXPECT_NE(error_of("peak_alocated < 1").find("unknown field 'peak_alocated'"), std::string::npos);
  EXPECT_NE(error_of("status = 'ok'").find("use '=='"), std::string::npos);
  EXPECT_NE(error_of("a && b").find("use 'and'"), std::string::npos);
  EXPECT_NE(error_of("status == 'ok").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("1 < 2 < 3").find("do not chain"), std::string::npos);
  EXPECT_NE(error_of("16Gb").find("unknown unit"), std::string::npos);
  EXPECT_NE(error_of("median(seq)").find("unknown function"), std::string::npos);
  EXPECT_NE(error_of("count(seq, batch)").find("one argument"), std::string::npos);
  EXPECT_NE(error_of("max(count(seq > 1))").find("do not nest"), std::string::npos);
  EXPECT_NE(error_of("(seq > 1").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of(std::string(200, '(') + "1" + std::string(200, ')')).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("x_custom > 1"), "x_custom > 1");  // runner-specific fields are allowed
  EXPECT_EQ(error_of("x_custom > 1"), "");
}

TEST(BenchExpression, TypeErrorsAtEvaluation) {
  const Fields row = {{"status", std::string("ok")}, {"seq", 512.0}};
  EXPECT_THROW(eval("status + 1", row), InputError);
  EXPECT_THROW(eval("status < 3", row), InputError);
  EXPECT_THROW(eval("seq and true", row), InputError);
  EXPECT_THROW(eval("true < false"), InputError);
  EXPECT_THROW(Expression::parse("count(seq > 1)").evaluate(&row), InputError);  // aggregates need the rows
}

}  // namespace
}  // namespace trainfit::bench
