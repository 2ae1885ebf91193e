#pragma once

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

namespace shardplan {

// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), as far as it
// decides how much device memory a sequence of allocations and frees reserves: sizes
// rounded up to 512 B; requests up to 1 MiB served from a small pool of 2 MiB segments,
// larger ones from a large pool whose segments are 20 MiB below 10 MiB and the request
// rounded up to 2 MiB above; the smallest free block that fits (best fit), split when
// the rest is at least 512 B (small) or above 1 MiB (large); freed blocks merge with free
// neighbours of their segment; segments are never returned (no empty_cache). One stream.
//
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "Note
// [Expandable Segments]" in the same file) each pool is one virtual segment whose physical
// pages are mapped on demand, 2 MiB pages for the small pool and 20 MiB for the large
// (find_expandable_block): a request no free block fits grows the segment at its end,
// reusing a free block at the end, and every remainder of at least 512 B is split off
// (should_split). Mapped pages stay mapped (no empty_cache): reserved is the mapped total.
class CachingAllocator {
 public:
  explicit CachingAllocator(bool expandable = false) : expandable_(expandable) {}

  static constexpr int64_t kMinBlockSize = 512;
  static constexpr int64_t kSmallSize = 1048576;
  static constexpr int64_t kSmallBuffer = 2097152;
  static constexpr int64_t kMinLargeAlloc = 10485760;
  static constexpr int64_t kLargeBuffer = 20971520;
  static constexpr int64_t kRoundLarge = 2097152;

  static int64_t round_size(int64_t bytes);
  // Bytes of a new segment for a request of `rounded` bytes.
  static int64_t segment_size(int64_t rounded);

  // Returns a handle for free(); zero-byte requests take 512 B as in PyTorch.
  int64_t allocate(int64_t bytes);
  void free(int64_t handle);

  int64_t allocated() const { return allocated_; }  // rounded sizes of live blocks
  int64_t reserved() const { return reserved_; }    // sum of segments

 private:
  struct Block {
    int64_t size = 0;
    int64_t address = 0;
    int64_t prev = -1;  // neighbours in the segment
    int64_t next = -1;
    bool small = false;
    bool in_use = false;
  };
  // Free blocks ordered as PyTorch's BlockComparator orders them: size, then address.
  using FreeSet = std::set<std::tuple<int64_t, int64_t, int64_t>>;  // size, address, block

  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }
  void insert_free(int64_t block);
  void erase_free(int64_t block);

  // Expandable segments: the pool's segment grows by at least `bytes`, from its last block.
  int64_t grow(bool small, int64_t bytes);

  bool expandable_ = false;
  int64_t tail_[2] = {-1, -1};      // expandable: the last block of each pool's segment
  int64_t mapped_end_[2] = {0, 0};  // expandable: mapped bytes of each pool's segment
  std::vector<Block> blocks_;       // handles index it; merged-away blocks stay as dead entries
  FreeSet small_free_, large_free_;
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
  int64_t next_address_ = 0;
};

}  // namespace shardplan
