#pragma once

// Building blocks the offset assigners share (best_fit, slots, repair, exact, auto):
// internal to the pool library, not part of its public interface (pool.h).
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "models/integer_math.h"
#include "pool/pool.h"

namespace shardplan::pool {

using Clock = std::chrono::steady_clock;

inline int64_t alignment_of(const PoolRequest& r, int64_t default_alignment) {
  return r.alignment > 0 ? r.alignment : std::max<int64_t>(default_alignment, 1);
}

// When a phase started at `start` must stop: after the time limit, or never with a node
// limit (then the clock must not decide: the planner's packing is the same everywhere).
inline Clock::time_point deadline_of(const PackOptions& options, Clock::time_point start) {
  if (options.node_limit > 0) return Clock::time_point::max();
  return start + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(options.time_limit_seconds));
}

// Marks a placement against the lower bound and the capacity: solved, proven optimal when
// at the bound, else infeasible or not_found when above the capacity.
PoolAssignment with_status(const std::vector<PoolRequest>& requests, PoolAssignment result,
                           int64_t lower_bound, const PackOptions& options);

// SplitMix64 (Steele, Lea & Flood, OOPSLA 2014): fully specified, so a seed gives the same
// numbers on every platform (std:: distributions do not).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

// The distinct begin and end times, sorted: the section boundaries.
std::vector<int64_t> distinct_times(const std::vector<PoolRequest>& requests);

// Whether a request takes space at all (zero bytes or an empty lifetime do not).
inline bool occupies(const PoolRequest& r) {
  return r.bytes > 0 && r.begin < r.end;
}

// The placed buffers, indexed by start time for overlap queries: a segment tree over the
// requests sorted by `begin`, each node holding the latest `end` among placed buffers
// below it. A query for [b, e) visits only subtrees that hold an overlapping buffer.
class PlacedIndex {
 public:
  explicit PlacedIndex(const std::vector<PoolRequest>& requests);
  void place(std::size_t request);
  void remove(std::size_t request);
  // Placed requests live at some time in [begin, end), into `out` (cleared first).
  void overlapping(int64_t begin, int64_t end, std::vector<std::size_t>& out) const;

 private:
  void update(std::size_t request, int64_t end);
  void collect(std::size_t node, std::size_t lo, std::size_t hi, std::size_t limit, int64_t begin,
               std::vector<std::size_t>& out) const;

  const std::vector<PoolRequest>& requests_;
  std::vector<std::size_t> by_begin_;
  std::vector<std::size_t> position_;
  std::size_t size_ = 1;
  std::vector<int64_t> max_end_;
};

// Where a buffer of `bytes` (aligned to `alignment`) goes among `taken`, the [offset, end)
// ranges of the placed buffers it meets in time, sorted by offset: the smallest gap that
// holds it (best fit), or the lowest (`lowest` true); else on top. -1 when the result
// would end above `limit`.
int64_t fit_offset(const std::vector<std::pair<int64_t, int64_t>>& taken, int64_t bytes,
                   int64_t alignment, int64_t limit, bool lowest);

// Places requests in `order`, each into the smallest gap that holds it among the placed
// buffers it overlaps in time, else on top of them. Nothing when `deadline` passes first.
std::optional<PoolAssignment> place_in_order(const std::vector<PoolRequest>& requests,
                                             const std::vector<std::size_t>& order,
                                             int64_t default_alignment, Clock::time_point deadline);

// What an allocator that sees the buffers come and go in time order would do: at each
// allocation the smallest free block that holds the buffer (best fit, the caching
// allocator's rule), else the pool's top grows; frees coalesce with free neighbours.
// O(n log n) on any input: the answer when nothing better finishes in time.
PoolAssignment place_online(const std::vector<PoolRequest>& requests, int64_t default_alignment);

// Megatron-FSDP's slots rule (make_slots_assigner); nothing when `deadline` passes first.
std::optional<PoolAssignment> place_slots(const std::vector<PoolRequest>& requests,
                                          const PackOptions& options, Clock::time_point deadline);

// Local improvement of a valid placement until `deadline`, or `iterations` rounds when
// that is positive (deterministic): ruin and recreate (Schrimpf et al. 2000) on the
// buffers that reach the top. Each round takes out the 4 to 128 highest buffers over the
// lifetime of one buffer at the height and places them again by best or lowest fit, in
// size, lifetime or shuffled order, under the current height; it keeps the
// result when fewer buffers reach the top (or as many, with no more bytes high up), so
// the height only falls. Never worse than `start`; stops at `lower_bound`.
PoolAssignment repair(const std::vector<PoolRequest>& requests, PoolAssignment start,
                      int64_t lower_bound, int64_t default_alignment, Clock::time_point deadline,
                      int64_t iterations, uint64_t seed);

}  // namespace shardplan::pool
