#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace shardplan {

// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), as far as it
// decides how much device memory a sequence of allocations and frees reserves: sizes
// rounded up to 512 B; requests up to 1 MiB served from a small pool of 2 MiB segments,
// larger ones from a large pool whose segments are 20 MiB below 10 MiB and the request
// rounded up to 2 MiB above; the smallest free block that fits (best fit), split when
// the rest is at least 512 B (small) or above 1 MiB (large); freed blocks merge with free
// neighbours of their segment. A block freed on one stream serves only allocations on
// that stream (each stream has its own pools).
//
// Segments stay cached until a new one would pass `limit` (the device memory the
// allocator may hold: the GPU's less what CUDA, NCCL and cuBLAS hold outside it). Then,
// as PyTorch does when cudaMalloc fails (malloc: alloc_block, release_cached_blocks,
// alloc_block again), every stream's fully free segments are returned and the request is
// tried once more; if it still does not fit the allocation fails (kOutOfMemory), which
// in PyTorch is the "CUDA out of memory" error. A free block that shares its segment with
// a live one (split) is not returned: that is the fragmentation that can end a job.
//
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "Note
// [Expandable Segments]" in the same file) each stream's pool is one virtual segment
// whose physical pages are mapped on demand, 2 MiB pages for the small pool and 20 MiB
// for the large (find_expandable_block, map_block): a request no mapped free block fits
// maps pages at the lowest unmapped address where, with a free block just before it,
// the request fits; every remainder of at least 512 B is split off (should_split). Best
// fit counts a free block followed by unmapped space as that much larger
// (get_free_block's expandable_size), so the end of a segment is used last. Mapped pages
// stay mapped until the limit is reached; then (release_cached_blocks → release_blocks →
// unmap_block) every page that lies wholly inside a free block of any stream is
// unmapped, and mapped again wherever it is next needed.
class CachingAllocator {
 public:
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  static constexpr int64_t kOutOfMemory = -1;

  explicit CachingAllocator(bool expandable = false, int64_t limit = kNoLimit);

  static constexpr int64_t kMinBlockSize = 512;
  static constexpr int64_t kSmallSize = 1048576;
  static constexpr int64_t kSmallBuffer = 2097152;
  static constexpr int64_t kMinLargeAlloc = 10485760;
  static constexpr int64_t kLargeBuffer = 20971520;
  static constexpr int64_t kRoundLarge = 2097152;

  static int64_t round_size(int64_t bytes);
  // Bytes of a new segment for a request of `rounded` bytes.
  static int64_t segment_size(int64_t rounded);

  // A block for `bytes` on `stream` (0, 1, ...): a handle for free(), or kOutOfMemory
  // when the request does not fit under the limit even after the cache is released.
  // Zero-byte requests take 512 B as in PyTorch.
  int64_t allocate(int64_t bytes, int stream = 0);
  void free(int64_t handle);

  int64_t allocated() const { return allocated_; }      // rounded sizes of live blocks
  int64_t reserved() const { return reserved_; }        // segments (expandable: mapped pages)
  int64_t cache_releases() const { return releases_; }  // times the limit emptied the cache

 private:
  struct Block {
    int64_t size = 0;
    int64_t address = 0;
    int64_t prev = -1;  // neighbours in the segment
    int64_t next = -1;
    int pool = 0;  // index into pools_
    bool in_use = false;
    bool mapped = true;  // expandable: backed by physical pages
  };
  // Free mapped blocks ordered as PyTorch's BlockComparatorSize orders one stream's:
  // size, then address.
  using FreeSet = std::set<std::tuple<int64_t, int64_t, int64_t>>;  // size, address, block
  // Expandable: unmapped blocks by address (BlockComparatorAddress).
  using UnmappedSet = std::set<std::pair<int64_t, int64_t>>;  // address, block
  struct Pool {
    bool small = false;
    int64_t base = 0;  // expandable: the segment's first address
    bool has_segment = false;
    FreeSet free;
    UnmappedSet unmapped;
  };

  int pool_index(int stream, bool small);
  void insert_free(int64_t block);
  void erase_free(int64_t block);
  int64_t take_free_block(Pool& pool, int64_t size);
  // Keeps the first `keep` bytes in `block` and makes the rest a new block right after it
  // (mapped or not, in no free set yet); returns the new block.
  int64_t split_tail(int64_t block, int64_t keep, bool mapped);
  int64_t new_block(int pool, int64_t size);  // -1: over the limit
  // Expandable segments.
  int64_t find_expandable_block(int pool, int64_t size);
  bool map_block(int64_t block, int64_t size);
  int64_t try_allocate_expandable_block(int pool, int64_t size);
  void unmap_block(int64_t block);
  // Merges free `src` into `dst` when both are free and equally mapped (try_merge_blocks).
  void try_merge(int64_t dst, int64_t src);
  void release_cached_blocks();
  int64_t page_size(const Pool& pool) const { return pool.small ? kSmallBuffer : kLargeBuffer; }

  bool expandable_ = false;
  int64_t limit_ = kNoLimit;
  std::vector<Pool> pools_;    // index 2·stream + small
  std::vector<Block> blocks_;  // handles index it; merged-away blocks stay as dead entries
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
  int64_t releases_ = 0;
  int64_t next_address_ = 0;  // classic segments
};

}  // namespace shardplan
