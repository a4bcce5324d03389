// libFuzzer target for the criteria language alone (a plan's `where`, `expect` and `exclude`): any
// text either parses or is an InputError, with and without the check of field names; what parses
// evaluates on each of a few rows and over all of them (the aggregates) to a value or an
// InputError. Nothing crashes, and nothing recurses deeper than the nesting limit allows (a long
// chain of operators once overflowed the stack). Seeds: fuzz/corpus/fuzz_criteria/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace {

using trainfit::bench::Fields;
using trainfit::bench::Value;

// Rows with every kind of value: strings, numbers (zero, negative, large), booleans, null, and
// fields that one row has and another lacks.
const std::vector<Fields>& synthetic_rows() {
  static const std::vector<Fields> rows = {
      {{"status", std::string("ok")}, {"verdict", std::string("fits")}, {"model", std::string("qwen2.5-7b")},
       {"peak_allocated", 9709.9}, {"vram", 16303.0}, {"params_b", 7.6}, {"grad_ckpt", true}, {"seq", 512.0},
       {"error", -0.012}, {"abs_error", 0.012}, {"step_seconds", 0.42}, {"x_note", std::string("a")}},
      {{"status", std::string("oom")}, {"verdict", std::string("oom")}, {"model", std::string("qwen2.5-14b")},
       {"peak_allocated", Value{}}, {"vram", 16303.0}, {"params_b", 14.8}, {"grad_ckpt", false}, {"seq", 0.0},
       {"error", Value{}}, {"step_seconds", Value{}}},
      {{"status", std::string("crashed")}, {"verdict", std::string("error")}, {"params_b", -1e300},
       {"grad_ckpt", Value{}}, {"seq", 1e308}, {"x_note", 3.0}},
  };
  return rows;
}

void evaluate_everywhere(const trainfit::bench::Expression& e) {
  const auto& rows = synthetic_rows();
  (void)e.has_aggregates();
  (void)e.uses_row_fields();
  auto check = [&](const trainfit::bench::Evaluation& r) {
    (void)trainfit::bench::to_string(r.value);
    for (std::size_t i = 0; i < r.rows.size(); ++i)
      if (r.rows[i] >= rows.size() || (i > 0 && r.rows[i] <= r.rows[i - 1])) __builtin_trap();  // sorted, unique, in range
  };
  for (const Fields& row : rows) {
    try {
      check(e.evaluate(&row, &rows));
    } catch (const trainfit::InputError&) {
    }
  }
  for (const Fields* row : {static_cast<const Fields*>(nullptr), &rows[0]}) {
    try {
      check(e.evaluate(row, nullptr));  // no rows: an aggregate is an error, not a crash
    } catch (const trainfit::InputError&) {
    }
  }
  try {
    check(e.evaluate(nullptr, &rows));
  } catch (const trainfit::InputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using trainfit::bench::Expression;
  try {
    evaluate_everywhere(Expression::parse(text, [](std::string_view f) { return trainfit::bench::is_row_field(f); }));
  } catch (const trainfit::InputError&) {
  }
  try {
    evaluate_everywhere(Expression::parse(text));  // any name is a field: the evaluator sees more
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
