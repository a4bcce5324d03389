// The caching allocator model (memory/caching_allocator.hpp) against the rules of PyTorch's
// c10/cuda/CUDACachingAllocator.cpp it restates: rounding and pools, best fit, splitting and
// merging, freeing the cache and retrying at the limit, and the failure that stranded memory makes.
#include "memory/caching_allocator.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "step/step_shape.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {
namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;
constexpr std::int64_t kNoLimit = std::int64_t{1} << 50;

TEST(CachingAllocatorModel, AFreshRequestTakesTheBlockTheMemoryModelCounts) {
  // allocator_block (step_shape.hpp) is what the planner counts for one request; the model must
  // hand out the same block from a fresh segment.
  for (const std::int64_t bytes : {std::int64_t{1}, std::int64_t{513}, MiB, MiB + 1, 9 * MiB + 7, 10 * MiB,
                                   10 * MiB + 1, 23 * MiB / 2, 43 * MiB + 300 * 1024, 1000 * MiB + 5}) {
    CachingAllocatorModel m(kNoLimit);
    ASSERT_TRUE(m.allocate(bytes));
    EXPECT_EQ(m.allocated_bytes(), static_cast<std::int64_t>(allocator_block(static_cast<double>(bytes)))) << bytes;
    EXPECT_EQ(m.reserved_bytes(), CachingAllocatorModel::segment_size(CachingAllocatorModel::block_size(bytes)))
        << bytes;
  }
  EXPECT_EQ(CachingAllocatorModel::segment_size(512), 2 * MiB);        // the small pool's segment
  EXPECT_EQ(CachingAllocatorModel::segment_size(MiB + 512), 20 * MiB);  // a large request under 10 MiB
  EXPECT_EQ(CachingAllocatorModel::segment_size(11 * MiB + 1), 12 * MiB);
}

TEST(CachingAllocatorModel, SmallRequestsShareASegment) {
  CachingAllocatorModel m(kNoLimit);
  for (int i = 0; i < 4096; ++i) ASSERT_TRUE(m.allocate(512));  // 4,096 x 512 B = one 2 MiB segment
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
  ASSERT_TRUE(m.allocate(1));
  EXPECT_EQ(m.reserved_bytes(), 4 * MiB);
}

TEST(CachingAllocatorModel, TheSmallestFreeBlockThatHoldsTheRequestIsTaken) {
  CachingAllocatorModel m(kNoLimit);
  const auto a = m.allocate(100 * MiB);
  const auto b = m.allocate(200 * MiB);
  ASSERT_TRUE(m.allocate(100 * MiB));
  m.free(*a);
  m.free(*b);
  ASSERT_TRUE(m.allocate(90 * MiB));  // from the 100 MiB block, split: the 200 MiB one stays whole
  EXPECT_EQ(m.largest_free_block_bytes(), 200 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 400 * MiB) << "no new segment";
  EXPECT_EQ(m.cached_free_bytes(), 210 * MiB);
}

TEST(CachingAllocatorModel, FreedNeighboursMergeAndASmallTailStaysInTheBlock) {
  CachingAllocatorModel m(kNoLimit);
  m.free(*m.allocate(100 * MiB));
  const auto x = m.allocate(30 * MiB);
  const auto y = m.allocate(30 * MiB);
  EXPECT_EQ(m.largest_free_block_bytes(), 40 * MiB);
  m.free(*x);
  m.free(*y);
  EXPECT_EQ(m.largest_free_block_bytes(), 100 * MiB) << "the three pieces merge back into the segment";
  // A 99.5 MiB request leaves 0.5 MiB: not more than 1 MiB, so the block keeps it.
  ASSERT_TRUE(m.allocate(99 * MiB + MiB / 2));
  EXPECT_EQ(m.allocated_bytes(), 100 * MiB);
  const auto z = m.allocate(MiB);
  m.free(*z);
  EXPECT_THROW(m.free(*z), std::logic_error);  // freed twice: not a block in use
}

TEST(CachingAllocatorModel, AtTheLimitItFreesItsCacheAndRetries) {
  CachingAllocatorModel m(100 * MiB);
  m.free(*m.allocate(60 * MiB));
  ASSERT_TRUE(m.allocate(70 * MiB));  // 60 + 70 > 100: the cached 60 MiB segment goes back first
  EXPECT_EQ(m.retries(), 1);
  EXPECT_EQ(m.reserved_bytes(), 70 * MiB);
  EXPECT_EQ(m.peak_reserved_bytes(), 70 * MiB);
  EXPECT_FALSE(m.allocate(40 * MiB)) << "70 in use + 40 > 100";
}

TEST(CachingAllocatorModel, MemoryStrandedInAUsedSegmentFailsARequestThatWouldFit) {
  CachingAllocatorModel m(100 * MiB);
  m.free(*m.allocate(80 * MiB));
  ASSERT_TRUE(m.allocate(20 * MiB));  // carved from the cached 80 MiB segment: 60 MiB free in it
  EXPECT_EQ(m.cached_free_bytes(), 60 * MiB);
  // 20 in use + 70 requested fit 100, but the 60 free MiB sit in a segment that cannot be given
  // back, and 80 + 70 is past the limit: PyTorch raises here.
  EXPECT_FALSE(m.allocate(70 * MiB));
  EXPECT_EQ(m.reserved_bytes(), 80 * MiB);
  ASSERT_TRUE(m.allocate(60 * MiB)) << "what the segment holds free is still served";
  EXPECT_EQ(m.cached_free_bytes(), 0);
}

}  // namespace
}  // namespace trainfit::detail
