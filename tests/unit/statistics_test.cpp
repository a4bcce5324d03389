// The one median and max_abs every summary of errors and step times uses.
#include <gtest/gtest.h>

#include "common/statistics.hpp"

namespace trainfit::detail {
namespace {

TEST(Statistics, MedianOfAnOddCountIsTheMiddleValue) {
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);  // unsorted input
}

TEST(Statistics, MedianOfAnEvenCountAveragesTheTwoMiddleValues) {
  EXPECT_EQ(median({4.0, 1.0, 2.0, 10.0}), 3.0);
  EXPECT_EQ(median({7.0}), 7.0);
}

TEST(Statistics, MedianOfNothingIsEmpty) { EXPECT_FALSE(median({}).has_value()); }

TEST(Statistics, MaxAbsTakesTheLargestMagnitude) {
  EXPECT_EQ(max_abs({0.1, -0.4, 0.3}), 0.4);
  EXPECT_EQ(max_abs({}), 0.0);
}

}  // namespace
}  // namespace trainfit::detail
