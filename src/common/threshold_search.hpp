#pragma once
// Searches over a threshold: a predicate that holds up to some value and not past it (memory grows
// with the batch and the sequence; a larger allocator limit serves at least as much). The plan's
// boundary, the advisor's largest batch and a snapshot's needed limit all search so.
#include <cstdint>

namespace trainfit::detail {

// The largest value lo + k * step below `hi` for which ok holds, given that ok(lo) holds and
// ok(hi) does not: halving the gap, about log2((hi - lo) / step) calls of ok.
template <class Ok>
std::int64_t last_holding(std::int64_t lo, std::int64_t hi, Ok&& ok, std::int64_t step = 1) {
  while (hi - lo > step) {
    const std::int64_t mid = lo + (hi - lo) / 2 / step * step;
    (ok(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace trainfit::detail
