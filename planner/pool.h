#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace shardplan {

// A transient buffer to place: `bytes` live over ops [begin, end) (half-open).
struct PoolRequest {
  int64_t bytes = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

struct PoolAssignment {
  std::vector<int64_t> offsets;  // one per request, multiples of the alignment
  int64_t size_bytes = 0;        // the pool: highest offset + bytes
};

// Places buffers at offsets so that no two live at once share a byte. Several algorithms
// implement it (STYLE.md §3); the event source (the plan's live intervals) stays apart.
class OffsetAssigner {
 public:
  virtual ~OffsetAssigner() = default;
  virtual std::string_view name() const = 0;
  virtual PoolAssignment assign(const std::vector<PoolRequest>& requests,
                                int64_t alignment_bytes) const = 0;
};

// Megatron-FSDP's TracePoolAllocator rule (seeds/001, PR #4435): buffers taken by size,
// largest first, each into the compatible slot (no member's lifetime overlaps it) that
// grows least — with sizes descending every compatible slot grows by 0, so the tightest
// one (smallest size, then lowest index) — else into a new slot; a slot is as large as
// its largest member and the pool is the sum of the slots. It never beats packing by
// offset, and the packing issue adds algorithms that do.
std::unique_ptr<OffsetAssigner> make_slots_assigner();

// The largest total of bytes live at any op: no placement can use less.
int64_t live_bytes_lower_bound(const std::vector<PoolRequest>& requests);

}  // namespace shardplan
