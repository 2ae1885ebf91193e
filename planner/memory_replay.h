#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.h"

namespace shardplan {

// One step's device memory as the job's allocator sees it, the one figure `plan` and
// `simulate` both report. The host allocates and frees in program order, which is the
// plan's op order: the persistent buffers first, then at each op the buffers whose live
// interval ends there are freed and those whose interval starts there are allocated (a
// use on a communication stream ends at the compute op that waits for it: the live
// intervals already say so). Times do not enter: PyTorch's caching allocator sees host
// calls, and a block freed on a stream may be handed out again at once.
//
// allocator `pool`: reserved is persistent + the plan's pool, allocated persistent +
// the live bytes. `caching` and `expandable`: PyTorch's caching allocator
// (pool/caching_allocator.h), under the GPU's memory less the non-tensor bytes, with the
// torch layout's sharded gradients on the reduce-scatter stream's own pools. A request
// that fails there even after the allocator returns its cache is PyTorch's out-of-memory
// error: the step does not fit, and the replay is run again without a limit to report
// the memory the step would need (above the capacity, since below it the limit is never
// reached).
struct MemoryReplay {
  // Bytes including the non-tensor memory. points[0]: after the persistent buffers;
  // points[i + 1]: the most while op i's frees and allocations run; points.back(): after
  // the step's last frees.
  struct Point {
    int64_t allocated = 0;
    int64_t reserved = 0;
  };
  std::vector<Point> points;
  int64_t peak_allocated = 0;  // allocated counts whole blocks, as PyTorch's allocated_bytes
  int64_t peak_reserved = 0;
  bool fits = true;            // peak_reserved ≤ the plan's capacity_bytes
  int64_t cache_releases = 0;  // times the limit made the allocator return its cache
};

MemoryReplay replay_memory(const Plan& plan);

}  // namespace shardplan
