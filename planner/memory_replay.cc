#include "planner/memory_replay.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "pool/caching_allocator.h"

namespace shardplan {
namespace {

// Transient buffers by the op that frees them and the op that allocates them, each list
// in buffer order. Index ops.size(): freed when the step ends.
struct ProgramOrder {
  std::vector<std::vector<int64_t>> frees, allocations;
};

ProgramOrder program_order(const Plan& plan) {
  const std::size_t n = plan.ops.size();
  ProgramOrder order{.frees = std::vector<std::vector<int64_t>>(n + 1),
                     .allocations = std::vector<std::vector<int64_t>>(n + 1)};
  for (const PlanBuffer& b : plan.buffers) {
    if (b.persistent || b.bytes <= 0 || b.live_begin < 0) continue;  // never touched
    const auto begin = static_cast<std::size_t>(b.live_begin);
    const auto end = std::min(static_cast<std::size_t>(b.live_end), n);
    order.allocations[begin].push_back(b.id);
    order.frees[end].push_back(b.id);
  }
  return order;
}

// PyTorch FSDP allocates the sharded gradients, the reduce-scatter's output, on its
// reduce-scatter stream (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
// foreach_reduce: `reduce_output` under `with device_handle.stream(reduce_scatter_stream)`;
// the copy-in input is the compute stream's): their blocks serve that stream only.
int allocation_stream(const Plan& plan, const PlanBuffer& b) {
  return torch_fsdp_layout(plan.config) && b.role == BufferRole::main_grad ? 1 : 0;
}

// The caching allocator's replay under `limit`; none when a request fails there.
std::optional<MemoryReplay> replay_caching(const Plan& plan, const ProgramOrder& order,
                                           int64_t limit) {
  const int64_t base = plan.non_tensor_bytes;
  CachingAllocator allocator(plan.config.allocator == Allocator::expandable, limit);
  std::vector<int64_t> handle(plan.buffers.size(), -1);
  MemoryReplay r;
  auto allocate = [&](const PlanBuffer& b) {
    const int64_t h = allocator.allocate(b.bytes, allocation_stream(plan, b));
    handle[static_cast<std::size_t>(b.id)] = h;
    return h != CachingAllocator::kOutOfMemory;
  };
  for (const PlanBuffer& b : plan.buffers) {
    if (b.persistent && !allocate(b)) return std::nullopt;
  }
  r.points.push_back({base + allocator.allocated(), base + allocator.reserved()});
  for (std::size_t i = 0; i < order.frees.size(); ++i) {
    for (const int64_t id : order.frees[i]) allocator.free(handle[static_cast<std::size_t>(id)]);
    MemoryReplay::Point most{base + allocator.allocated(), base + allocator.reserved()};
    for (const int64_t id : order.allocations[i]) {
      if (!allocate(plan.buffers[static_cast<std::size_t>(id)])) return std::nullopt;
      // A release inside the op lowers reserved: the op's point is its highest state.
      most.allocated = std::max(most.allocated, base + allocator.allocated());
      most.reserved = std::max(most.reserved, base + allocator.reserved());
    }
    r.points.push_back(most);
  }
  r.cache_releases = allocator.cache_releases();
  return r;
}

MemoryReplay replay_pool(const Plan& plan, const ProgramOrder& order) {
  int64_t persistent = 0;
  for (const PlanBuffer& b : plan.buffers) persistent += b.persistent ? b.bytes : 0;
  const int64_t held = plan.non_tensor_bytes + persistent;
  const int64_t reserved = held + plan.pool.size_bytes;
  MemoryReplay r;
  r.points.push_back({held, reserved});
  int64_t live = 0;
  for (std::size_t i = 0; i < order.frees.size(); ++i) {
    for (const int64_t id : order.frees[i])
      live -= plan.buffers[static_cast<std::size_t>(id)].bytes;
    for (const int64_t id : order.allocations[i])
      live += plan.buffers[static_cast<std::size_t>(id)].bytes;
    r.points.push_back({held + live, reserved});
  }
  return r;
}

}  // namespace

MemoryReplay replay_memory(const Plan& plan) {
  const ProgramOrder order = program_order(plan);
  MemoryReplay r;
  if (plan.config.allocator == Allocator::pool) {
    r = replay_pool(plan, order);
  } else if (auto capped =
                 replay_caching(plan, order, plan.capacity_bytes - plan.non_tensor_bytes)) {
    r = std::move(*capped);
  } else {
    // Out of memory: the same replay on a GPU without a limit, whose peak is what the
    // step would need.
    r = *replay_caching(plan, order, CachingAllocator::kNoLimit);
    r.fits = false;
  }
  for (const MemoryReplay::Point& p : r.points) {
    r.peak_allocated = std::max(r.peak_allocated, p.allocated);
    r.peak_reserved = std::max(r.peak_reserved, p.reserved);
  }
  r.fits = r.fits && r.peak_reserved <= plan.capacity_bytes;
  if (!r.fits && r.peak_reserved <= plan.capacity_bytes)
    throw std::logic_error("replay_memory: out of memory below the capacity");
  return r;
}

}  // namespace shardplan
