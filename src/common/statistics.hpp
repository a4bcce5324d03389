#pragma once
// Summary statistics of error and timing series, one definition for every part of trainfit.
#include <optional>
#include <vector>

namespace trainfit::detail {

// The middle value of `values`, or the mean of the two middle ones when their count is even;
// empty when there are none.
std::optional<double> median(std::vector<double> values);

// The largest |value|; 0 when there are none.
double max_abs(const std::vector<double>& values);

}  // namespace trainfit::detail
