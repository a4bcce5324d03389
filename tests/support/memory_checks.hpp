#pragma once
// What every memory estimate must hold, whatever the setup: its breakdown adds up to the peak (to
// rounding), and the peak is the highest of its phases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "trainfit/memory.hpp"

namespace trainfit::testing {

inline void expect_breakdown_and_phases_make_the_peak(const MemoryEstimate& e) {
  std::int64_t sum = 0;
  for (const auto& t : e.breakdown) sum += t.bytes;
  EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(e.peak_allocated_bytes), 16.0);
  std::int64_t phase_max = 0;
  for (const auto& p : e.phases) phase_max = std::max(phase_max, p.allocated_bytes);
  EXPECT_EQ(phase_max, e.peak_allocated_bytes);
}

}  // namespace trainfit::testing
