#pragma once
// One term of a plan's breakdowns by its name: the bytes of a memory category, the seconds of a
// time term (0 when the plan has no such term).
#include <string_view>

#include "trainfit/memory.hpp"
#include "trainfit/time.hpp"

namespace trainfit::testing {

inline double term(const MemoryEstimate& m, std::string_view category) {
  for (const MemoryTerm& t : m.breakdown)
    if (t.category == category) return static_cast<double>(t.bytes);
  return 0;
}

inline double term(const TimeEstimate& t, std::string_view name) {
  for (const TimeTerm& x : t.breakdown)
    if (x.name == name) return x.seconds;
  return 0;
}

}  // namespace trainfit::testing
