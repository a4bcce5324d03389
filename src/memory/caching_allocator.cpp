#include "memory/caching_allocator.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "step/step_shape.hpp"

namespace trainfit::detail {

namespace {
namespace ca = caching_allocator;
constexpr auto kMinBlock = static_cast<std::int64_t>(ca::kMinBlockSize);
constexpr auto kSmallSize = static_cast<std::int64_t>(ca::kSmallSize);
constexpr auto kMinLargeAlloc = static_cast<std::int64_t>(ca::kMinLargeAlloc);
constexpr auto kRoundLarge = static_cast<std::int64_t>(ca::kRoundLarge);
constexpr std::int64_t kSmallBuffer = 2 * kSmallSize;    // a small-pool segment
constexpr std::int64_t kLargeBuffer = 20 * kSmallSize;   // a large-pool segment for a request under 10 MiB

std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

std::int64_t CachingAllocatorModel::block_size(std::int64_t bytes) {
  return bytes < kMinBlock ? kMinBlock : round_up(bytes, kMinBlock);
}

bool CachingAllocatorModel::small_pool(std::int64_t block_bytes) {
  return block_bytes <= kSmallSize;
}

std::int64_t CachingAllocatorModel::segment_size(std::int64_t block_bytes) {
  if (block_bytes <= kSmallSize) return kSmallBuffer;
  if (block_bytes < kMinLargeAlloc) return kLargeBuffer;
  return round_up(block_bytes, kRoundLarge);
}

CachingAllocatorModel::Handle CachingAllocatorModel::make_block(Block b) {
  if (!unused_.empty()) {
    const Handle h = unused_.back();
    unused_.pop_back();
    blocks_[h] = b;
    return h;
  }
  blocks_.push_back(b);
  return blocks_.size() - 1;
}

std::optional<CachingAllocatorModel::Handle> CachingAllocatorModel::take_free(std::int64_t size, bool small) {
  std::set<FreeKey>& p = pool(small);
  const auto it = p.lower_bound({size, 0, 0});
  if (it == p.end()) return std::nullopt;
  const Handle h = std::get<2>(*it);
  p.erase(it);
  return h;
}

std::optional<CachingAllocatorModel::Handle> CachingAllocatorModel::new_segment(std::int64_t size, bool small) {
  const std::int64_t bytes = segment_size(size);
  if (reserved_ + bytes > limit_) return std::nullopt;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  const Handle h = make_block({next_address_, bytes, false, small, std::nullopt, std::nullopt});
  next_address_ += bytes;
  return h;
}

// release_cached_blocks: every free block that is a whole segment goes back to the driver.
void CachingAllocatorModel::release_cached() {
  for (const bool small : {true, false}) {
    std::set<FreeKey>& p = pool(small);
    for (auto it = p.begin(); it != p.end();) {
      const Handle h = std::get<2>(*it);
      if (blocks_[h].prev || blocks_[h].next) {
        ++it;
        continue;
      }
      reserved_ -= blocks_[h].size;
      unused_.push_back(h);
      it = p.erase(it);
    }
  }
}

std::optional<CachingAllocatorModel::Handle> CachingAllocatorModel::allocate(std::int64_t bytes) {
  const std::int64_t size = block_size(bytes);
  const bool small = small_pool(size);
  std::optional<Handle> found = take_free(size, small);
  if (!found) found = new_segment(size, small);
  if (!found) {
    release_cached();
    found = new_segment(size, small);
    if (!found) return std::nullopt;
    ++retries_;
  }
  const Handle h = *found;
  const std::int64_t remaining = blocks_[h].size - size;
  if (small ? remaining >= kMinBlock : remaining > kSmallSize) {
    Block rest{blocks_[h].address + size, remaining, false, small, h, blocks_[h].next};
    const Handle r = make_block(rest);  // may grow blocks_: index, not reference, from here
    if (blocks_[r].next) blocks_[*blocks_[r].next].prev = r;
    blocks_[h].next = r;
    blocks_[h].size = size;
    pool(small).insert({remaining, blocks_[r].address, r});
  }
  blocks_[h].in_use = true;
  allocated_ += blocks_[h].size;
  return h;
}

void CachingAllocatorModel::free(Handle block) {
  if (block >= blocks_.size() || !blocks_[block].in_use)
    throw std::logic_error("CachingAllocatorModel::free: not a block in use");
  Handle h = block;
  blocks_[h].in_use = false;
  allocated_ -= blocks_[h].size;
  const bool small = blocks_[h].small;
  std::set<FreeKey>& p = pool(small);
  // Merge with a free neighbour on either side (try_merge_blocks).
  if (const auto prev = blocks_[h].prev; prev && !blocks_[*prev].in_use) {
    p.erase({blocks_[*prev].size, blocks_[*prev].address, *prev});
    blocks_[*prev].size += blocks_[h].size;
    blocks_[*prev].next = blocks_[h].next;
    if (blocks_[h].next) blocks_[*blocks_[h].next].prev = *prev;
    unused_.push_back(h);
    h = *prev;
  }
  if (const auto next = blocks_[h].next; next && !blocks_[*next].in_use) {
    p.erase({blocks_[*next].size, blocks_[*next].address, *next});
    blocks_[h].size += blocks_[*next].size;
    blocks_[h].next = blocks_[*next].next;
    if (blocks_[*next].next) blocks_[*blocks_[*next].next].prev = h;
    unused_.push_back(*next);
  }
  p.insert({blocks_[h].size, blocks_[h].address, h});
}

std::int64_t CachingAllocatorModel::largest_free_block_bytes() const {
  std::int64_t out = 0;
  if (!small_free_.empty()) out = std::get<0>(*small_free_.rbegin());
  if (!large_free_.empty()) out = std::max(out, std::get<0>(*large_free_.rbegin()));
  return out;
}

}  // namespace trainfit::detail
