#include "pool/caching_allocator.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace shardplan {
namespace {

// Address space: classic segments from 0; each expandable segment at its own base above
// (PyTorch reserves 1 1/8 of the GPU's memory per segment; a much larger range here, so
// a segment never runs out of addresses: plans are bounded far below it).
constexpr int64_t kSegmentSpacing = int64_t{1} << 52;
constexpr int64_t kVirtualBytes = int64_t{1} << 50;
constexpr int kMaxPools = 2046;  // bases stay below 2^63

int64_t round_up(int64_t bytes, int64_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace

CachingAllocator::CachingAllocator(bool expandable, int64_t limit)
    : expandable_(expandable), limit_(limit) {}

int64_t CachingAllocator::round_size(int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return round_up(bytes, kMinBlockSize);
}

int64_t CachingAllocator::segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

int CachingAllocator::pool_index(int stream, bool small) {
  if (stream < 0 || 2 * stream + 1 >= kMaxPools)
    throw std::logic_error("caching allocator: stream out of range");
  const int index = 2 * stream + (small ? 1 : 0);
  while (static_cast<int>(pools_.size()) <= index) {
    const int i = static_cast<int>(pools_.size());
    pools_.push_back(Pool{.small = i % 2 == 1, .base = (i + 1) * kSegmentSpacing});
  }
  return index;
}

void CachingAllocator::insert_free(int64_t block) {
  const Block& b = blocks_[static_cast<std::size_t>(block)];
  pools_[static_cast<std::size_t>(b.pool)].free.emplace(b.size, b.address, block);
}

void CachingAllocator::erase_free(int64_t block) {
  const Block& b = blocks_[static_cast<std::size_t>(block)];
  pools_[static_cast<std::size_t>(b.pool)].free.erase({b.size, b.address, block});
}

int64_t CachingAllocator::take_free_block(Pool& pool, int64_t size) {
  auto it = pool.free.lower_bound({size, INT64_MIN, INT64_MIN});
  if (it == pool.free.end()) return -1;
  if (expandable_) {
    // get_free_block: a block followed by unmapped space can grow by all of it, so for
    // best fit it is that large; move on to the next bigger block while that one is
    // smaller so counted.
    auto expandable_size = [&](int64_t id) {
      const Block& b = blocks_[static_cast<std::size_t>(id)];
      const bool unmapped_next = b.next >= 0 && !blocks_[static_cast<std::size_t>(b.next)].mapped;
      return b.size + (unmapped_next ? blocks_[static_cast<std::size_t>(b.next)].size : 0);
    };
    for (auto next = std::next(it);
         next != pool.free.end() &&
         expandable_size(std::get<2>(*next)) < expandable_size(std::get<2>(*it));
         ++next) {
      it = next;
    }
  }
  const int64_t block = std::get<2>(*it);
  pool.free.erase(it);
  return block;
}

int64_t CachingAllocator::new_block(int pool, int64_t size) {
  if (expandable_) return try_allocate_expandable_block(pool, size);
  const int64_t segment = segment_size(size);
  if (segment > limit_ - reserved_) return -1;  // cudaMalloc fails
  const auto block = static_cast<int64_t>(blocks_.size());
  blocks_.push_back(Block{.size = segment, .address = next_address_, .pool = pool});
  next_address_ += segment;
  reserved_ += segment;
  return block;
}

int64_t CachingAllocator::find_expandable_block(int pool, int64_t size) {
  Pool& p = pools_[static_cast<std::size_t>(pool)];
  if (!p.has_segment) {
    const auto block = static_cast<int64_t>(blocks_.size());
    blocks_.push_back(
        Block{.size = kVirtualBytes, .address = p.base, .pool = pool, .mapped = false});
    p.unmapped.emplace(p.base, block);
    p.has_segment = true;
  }
  auto allocatable = [&](int64_t id) {
    return id >= 0 && !blocks_[static_cast<std::size_t>(id)].in_use;
  };
  for (const auto& [address, id] : p.unmapped) {
    // The lowest unmapped range, with the free block just before it if there is one.
    int64_t c = id;
    if (allocatable(blocks_[static_cast<std::size_t>(id)].prev))
      c = blocks_[static_cast<std::size_t>(id)].prev;
    int64_t bytes = 0;
    for (int64_t x = c; bytes < size && allocatable(x);
         x = blocks_[static_cast<std::size_t>(x)].next)
      bytes += blocks_[static_cast<std::size_t>(x)].size;
    if (bytes >= size) return c;
  }
  return -1;
}

int64_t CachingAllocator::split_tail(int64_t block, int64_t keep, bool mapped) {
  const auto tail = static_cast<int64_t>(blocks_.size());
  const Block head = blocks_[static_cast<std::size_t>(block)];
  if (head.next >= 0) blocks_[static_cast<std::size_t>(head.next)].prev = tail;
  blocks_.push_back(Block{.size = head.size - keep,
                          .address = head.address + keep,
                          .prev = block,
                          .next = head.next,
                          .pool = head.pool,
                          .mapped = mapped});
  Block& kept = blocks_[static_cast<std::size_t>(block)];
  kept.next = tail;
  kept.size = keep;
  return tail;
}

bool CachingAllocator::map_block(int64_t block, int64_t size) {
  Block& b = blocks_[static_cast<std::size_t>(block)];
  Pool& p = pools_[static_cast<std::size_t>(b.pool)];
  // Unmapped blocks start on a page; the pages that hold `size` bytes, all or none.
  const int64_t mapped = std::min(round_up(size, page_size(p)), b.size);
  if (mapped > limit_ - reserved_) return false;
  p.unmapped.erase({b.address, block});
  b.mapped = true;
  if (mapped < b.size) {
    const int64_t rest = split_tail(block, mapped, false);
    p.unmapped.emplace(blocks_[static_cast<std::size_t>(rest)].address, rest);
  }
  try_merge(block, blocks_[static_cast<std::size_t>(block)].prev);
  try_merge(block, blocks_[static_cast<std::size_t>(block)].next);
  insert_free(block);
  reserved_ += mapped;
  return true;
}

int64_t CachingAllocator::try_allocate_expandable_block(int pool, int64_t size) {
  int64_t candidate = find_expandable_block(pool, size);
  if (candidate < 0) return -1;
  if (!blocks_[static_cast<std::size_t>(candidate)].mapped &&
      !map_block(candidate, std::min(blocks_[static_cast<std::size_t>(candidate)].size, size))) {
    return -1;
  }
  // A free block, then unmapped space: map what is missing; the new pages merge with it.
  while (blocks_[static_cast<std::size_t>(candidate)].size < size) {
    const int64_t missing = size - blocks_[static_cast<std::size_t>(candidate)].size;
    const int64_t next = blocks_[static_cast<std::size_t>(candidate)].next;
    if (!map_block(next, std::min(missing, blocks_[static_cast<std::size_t>(next)].size)))
      return -1;
    candidate = next;
  }
  erase_free(candidate);
  return candidate;
}

void CachingAllocator::try_merge(int64_t dst, int64_t src) {
  if (src < 0) return;
  Block& s = blocks_[static_cast<std::size_t>(src)];
  Block& d = blocks_[static_cast<std::size_t>(dst)];
  if (s.in_use || s.mapped != d.mapped) return;
  Pool& p = pools_[static_cast<std::size_t>(s.pool)];
  if (s.mapped) {
    erase_free(src);
  } else {
    p.unmapped.erase({s.address, src});
  }
  if (src == d.prev) {
    d.address = s.address;
    d.prev = s.prev;
    if (s.prev >= 0) blocks_[static_cast<std::size_t>(s.prev)].next = dst;
  } else {
    d.next = s.next;
    if (s.next >= 0) blocks_[static_cast<std::size_t>(s.next)].prev = dst;
  }
  d.size += s.size;
  s.size = 0;
  s.prev = s.next = -1;
}

void CachingAllocator::unmap_block(int64_t block) {
  Block& b = blocks_[static_cast<std::size_t>(block)];
  Pool& p = pools_[static_cast<std::size_t>(b.pool)];
  const int64_t page = page_size(p);
  // Pages wholly inside the block (ExpandableSegment::unmap).
  const int64_t lo = p.base + round_up(b.address - p.base, page);
  const int64_t hi = p.base + (b.address + b.size - p.base) / page * page;
  if (hi <= lo) return;
  erase_free(block);
  auto split_off = [&](int64_t address, int64_t size, bool before) {
    const auto id = static_cast<int64_t>(blocks_.size());
    Block& self = blocks_[static_cast<std::size_t>(block)];
    Block piece{.size = size, .address = address, .pool = self.pool};
    if (before) {
      piece.prev = self.prev;
      piece.next = block;
      if (self.prev >= 0) blocks_[static_cast<std::size_t>(self.prev)].next = id;
      self.prev = id;
    } else {
      piece.prev = block;
      piece.next = self.next;
      if (self.next >= 0) blocks_[static_cast<std::size_t>(self.next)].prev = id;
      self.next = id;
    }
    blocks_.push_back(piece);
    insert_free(id);
  };
  const int64_t address = b.address, end = b.address + b.size;
  if (lo > address) split_off(address, lo - address, true);
  if (end > hi) split_off(hi, end - hi, false);
  Block& self = blocks_[static_cast<std::size_t>(block)];
  self.address = lo;
  self.size = hi - lo;
  self.mapped = false;
  try_merge(block, self.prev);
  try_merge(block, blocks_[static_cast<std::size_t>(block)].next);
  p.unmapped.emplace(blocks_[static_cast<std::size_t>(block)].address, block);
  reserved_ -= hi - lo;
}

void CachingAllocator::release_cached_blocks() {
  ++releases_;
  for (Pool& p : pools_) {
    std::vector<int64_t> release;
    for (const auto& entry : p.free) {
      const int64_t id = std::get<2>(entry);
      const Block& b = blocks_[static_cast<std::size_t>(id)];
      // Classic: only whole segments go back (release_blocks: !prev && !next).
      if (expandable_ || (b.prev < 0 && b.next < 0)) release.push_back(id);
    }
    for (const int64_t id : release) {
      if (expandable_) {
        unmap_block(id);
        continue;
      }
      erase_free(id);
      Block& b = blocks_[static_cast<std::size_t>(id)];
      reserved_ -= b.size;
      b.size = 0;  // cudaFree: the handle is dead
    }
  }
}

int64_t CachingAllocator::allocate(int64_t bytes, int stream) {
  const int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  const int pool = pool_index(stream, small);
  int64_t block = take_free_block(pools_[static_cast<std::size_t>(pool)], size);
  if (block < 0) block = new_block(pool, size);
  if (block < 0) {
    release_cached_blocks();
    block = new_block(pool, size);
  }
  if (block < 0) return kOutOfMemory;
  Block& b = blocks_[static_cast<std::size_t>(block)];
  const int64_t rest = b.size - size;
  if (small || expandable_ ? rest >= kMinBlockSize : rest > kSmallSize) {
    insert_free(split_tail(block, size, true));
  }
  Block& used = blocks_[static_cast<std::size_t>(block)];
  used.in_use = true;
  allocated_ += used.size;
  return block;
}

void CachingAllocator::free(int64_t handle) {
  if (handle < 0 || handle >= static_cast<int64_t>(blocks_.size()) ||
      !blocks_[static_cast<std::size_t>(handle)].in_use) {
    throw std::logic_error("caching allocator: free of a block that is not allocated");
  }
  Block& b = blocks_[static_cast<std::size_t>(handle)];
  b.in_use = false;
  allocated_ -= b.size;
  // Merge with free neighbours of the same segment (PyTorch's free_block, try_merge_blocks).
  try_merge(handle, blocks_[static_cast<std::size_t>(handle)].prev);
  try_merge(handle, blocks_[static_cast<std::size_t>(handle)].next);
  insert_free(handle);
}

}  // namespace shardplan
