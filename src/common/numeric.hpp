#pragma once
// Counts (parameters, tokens, layers) are int64; the formulas that use them are in doubles.
#include <cstdint>

namespace trainfit::detail {

inline double as_d(std::int64_t v) {
  return static_cast<double>(v);
}

}  // namespace trainfit::detail
