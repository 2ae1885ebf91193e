#include "pool/caching_allocator.h"

#include <stdexcept>

namespace shardplan {

int64_t CachingAllocator::round_size(int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

int64_t CachingAllocator::segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void CachingAllocator::insert_free(int64_t block) {
  const Block& b = blocks_[static_cast<std::size_t>(block)];
  pool(b.small).emplace(b.size, b.address, block);
}

void CachingAllocator::erase_free(int64_t block) {
  const Block& b = blocks_[static_cast<std::size_t>(block)];
  pool(b.small).erase({b.size, b.address, block});
}

int64_t CachingAllocator::grow(bool small, int64_t bytes) {
  const int64_t page = small ? kSmallBuffer : kLargeBuffer;
  int64_t& tail = tail_[small ? 1 : 0];
  if (tail >= 0 && !blocks_[static_cast<std::size_t>(tail)].in_use) {
    // The free block at the end grows into the newly mapped pages.
    Block& last = blocks_[static_cast<std::size_t>(tail)];
    const int64_t mapped = (bytes - last.size + page - 1) / page * page;
    erase_free(tail);
    blocks_[static_cast<std::size_t>(tail)].size += mapped;
    mapped_end_[small ? 1 : 0] += mapped;
    reserved_ += mapped;
    return tail;
  }
  const int64_t mapped = (bytes + page - 1) / page * page;
  // Each pool's segment has its own address range (small pool above 2^56).
  const int64_t base = small ? int64_t{1} << 56 : 0;
  const auto block = static_cast<int64_t>(blocks_.size());
  blocks_.push_back(Block{
      .size = mapped, .address = base + mapped_end_[small ? 1 : 0], .prev = tail, .small = small});
  if (tail >= 0) blocks_[static_cast<std::size_t>(tail)].next = block;
  tail = block;
  mapped_end_[small ? 1 : 0] += mapped;
  reserved_ += mapped;
  return block;
}

int64_t CachingAllocator::allocate(int64_t bytes) {
  const int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  FreeSet& free = pool(small);
  int64_t block = -1;
  if (auto it = free.lower_bound({size, INT64_MIN, INT64_MIN}); it != free.end()) {
    block = std::get<2>(*it);
    free.erase(it);
  } else if (expandable_) {
    block = grow(small, size);
  } else {
    const int64_t segment = segment_size(size);
    block = static_cast<int64_t>(blocks_.size());
    blocks_.push_back(Block{.size = segment, .address = next_address_, .small = small});
    next_address_ += segment;
    reserved_ += segment;
  }
  Block& b = blocks_[static_cast<std::size_t>(block)];
  const int64_t rest = b.size - size;
  if (small || expandable_ ? rest >= kMinBlockSize : rest > kSmallSize) {
    const auto tail = static_cast<int64_t>(blocks_.size());
    Block split{
        .size = rest, .address = b.address + size, .prev = block, .next = b.next, .small = small};
    if (b.next >= 0) blocks_[static_cast<std::size_t>(b.next)].prev = tail;
    blocks_.push_back(split);
    Block& head = blocks_[static_cast<std::size_t>(block)];
    head.next = tail;
    head.size = size;
    insert_free(tail);
    if (tail_[small ? 1 : 0] == block) tail_[small ? 1 : 0] = tail;
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
  // Merge with free neighbours of the same segment (PyTorch's try_merge_blocks).
  for (const int64_t neighbour : {b.prev, b.next}) {
    if (neighbour < 0) continue;
    Block& n = blocks_[static_cast<std::size_t>(neighbour)];
    if (n.in_use) continue;
    erase_free(neighbour);
    Block& self = blocks_[static_cast<std::size_t>(handle)];
    if (neighbour == self.prev) {
      self.address = n.address;
      self.prev = n.prev;
      if (n.prev >= 0) blocks_[static_cast<std::size_t>(n.prev)].next = handle;
    } else {
      self.next = n.next;
      if (n.next >= 0) blocks_[static_cast<std::size_t>(n.next)].prev = handle;
      if (tail_[self.small ? 1 : 0] == neighbour) tail_[self.small ? 1 : 0] = handle;
    }
    self.size += n.size;
    n.size = 0;
    n.prev = n.next = -1;
  }
  insert_free(handle);
}

}  // namespace shardplan
