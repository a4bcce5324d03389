#pragma once
// PyTorch's CUDA caching allocator as a model: the same requests served by the same rules, so that
// what it does when memory is short can be asked of a request stream (the history a memory snapshot
// recorded, or a step's tensors) without a GPU. The rules are those of
// c10/cuda/CUDACachingAllocator.cpp with its defaults, which the snapshots' allocator_settings show
// (no max_split_size, no expandable segments, no garbage-collection threshold, no rounding to
// powers of two) and one stream:
// - a request is rounded up to a multiple of 512 bytes; up to 1 MiB it is served from the small
//   pool, whose segments are 2 MiB, else from the large pool, whose segments are 20 MiB for requests
//   under 10 MiB and the request rounded up to 2 MiB from there (step_shape.hpp's constants);
// - it takes the smallest cached free block of its pool that holds it (best fit; the lower address
//   among equals), split when what remains is at least 512 bytes (small pool) or more than 1 MiB
//   (large pool); a freed block merges with free neighbours of its segment;
// - with no such block it asks the driver for a new segment, refused past the process's limit
//   (torch.cuda.set_per_process_memory_fraction, or the card); refused, it frees every cached
//   segment that holds no block in use (release_cached_blocks) and asks once more; refused again,
//   the request fails (torch.OutOfMemoryError). Free memory inside a segment that still holds a
//   block in use cannot be given back: that is the fragmentation an out-of-memory error names.
#include <cstdint>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace trainfit::detail {

class CachingAllocatorModel {
 public:
  using Handle = std::size_t;  // a block handed out

  // `limit_bytes`: the most its segments may reserve together.
  explicit CachingAllocatorModel(std::int64_t limit_bytes) : limit_(limit_bytes) {}

  // Serves a request of `bytes`; nullopt where PyTorch raises OutOfMemoryError.
  std::optional<Handle> allocate(std::int64_t bytes);
  // Gives a block back to its pool (a handle served and not yet freed).
  void free(Handle block);

  std::int64_t allocated_bytes() const { return allocated_; }
  std::int64_t reserved_bytes() const { return reserved_; }
  std::int64_t peak_reserved_bytes() const { return peak_reserved_; }
  std::int64_t cached_free_bytes() const { return reserved_ - allocated_; }
  std::int64_t largest_free_block_bytes() const;
  // The times a request was served only after the cache was freed (PyTorch's num_alloc_retries).
  std::int64_t retries() const { return retries_; }

  // The block a request of `bytes` takes (rounded to 512 bytes) and the segment it would ask for.
  static std::int64_t block_size(std::int64_t bytes);
  static std::int64_t segment_size(std::int64_t block_bytes);
  static bool small_pool(std::int64_t block_bytes);

 private:
  struct Block {
    std::int64_t address = 0, size = 0;
    bool in_use = false, small = false;
    std::optional<Handle> prev, next;  // neighbours in its segment
  };
  using FreeKey = std::tuple<std::int64_t, std::int64_t, Handle>;  // size, address, block
  std::set<FreeKey>& pool(bool small) { return small ? small_free_ : large_free_; }
  std::optional<Handle> take_free(std::int64_t size, bool small);
  std::optional<Handle> new_segment(std::int64_t size, bool small);
  void release_cached();
  Handle make_block(Block b);

  std::int64_t limit_;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_reserved_ = 0, retries_ = 0;
  std::int64_t next_address_ = 0;  // segments are laid out in the order they are made
  std::vector<Block> blocks_;
  std::vector<Handle> unused_;  // slots of blocks merged away, reused
  std::set<FreeKey> small_free_, large_free_;
};

}  // namespace trainfit::detail
