#pragma once

// Building blocks the offset assigners share (best_fit, slots, repair, exact, auto):
// internal to the pool library, not part of its public interface (pool.h).
#include <atomic>
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

// The offsets placed buffers take over time, for best fit: a segment tree over the time
// sections, each placed buffer kept at the O(log T) nodes that tile its lifetime, each
// node holding the offset ranges of its buffers sorted and merged where they touch. The
// buffers of one node are all live over its whole range, so they never share bytes;
// buffers stacked on each other become one range. A query gathers the ranges of the
// nodes its lifetime meets: a few runs where the placed buffers sit in stacks, where
// gathering the buffers themselves (PlacedIndex) costs thousands on inputs with
// thousands live at once (a 29 483-buffer MoE trace, one order of best fit: 0.03 s
// instead of 2.6 s by lifetime, 3.7 s instead of 5.2 s by size).
//
//   node [0,8) ─ long-lived ranges    a buffer over sections [2,7) sits at the nodes
//     [0,4)  [4,8)                    [2,4) and [4,6) and [6,7); a query over [3,4)
//   [0,2)[2,4)[4,6)[6,8)              meets [0,8), [0,4), [2,4) and [3,4)
class TakenOffsets {
 public:
  explicit TakenOffsets(const std::vector<PoolRequest>& requests);
  // Records `request` (one that occupies space) at `offset`.
  void place(std::size_t request, int64_t offset);
  // The [offset, end) ranges taken while `request` is live, sorted by offset, into `out`
  // (cleared first); they may touch or overlap one another.
  void taken(std::size_t request, std::vector<std::pair<int64_t, int64_t>>& out) const;

 private:
  using Range = std::pair<int64_t, int64_t>;
  void gather(std::size_t node, std::size_t lo, std::size_t hi, std::size_t from,
              std::size_t to) const;
  // Appends the union of the sorted lists a and b to `out`, sorted, touching ranges joined.
  static void union_of(const Range* a, const Range* a_end, const Range* b, const Range* b_end,
                       std::vector<Range>& out);

  std::vector<int32_t> section_lo_, section_hi_;  // per request: sections [lo, hi)
  std::vector<int64_t> bytes_;
  std::size_t leaves_ = 1;
  std::vector<std::vector<Range>> runs_;  // per node, sorted and merged
  std::vector<int64_t> below_;            // per node: ranges ever added in its subtree (0: skip)
  // Scratch space of taken(): the nodes met, two buffers for the merge rounds and the
  // [begin, end) of each list in the current one.
  mutable std::vector<std::size_t> pieces_;
  mutable std::vector<Range> scratch_[2];
  mutable std::vector<std::pair<std::size_t, std::size_t>> spans_;
};

// Where a buffer of `bytes` (aligned to `alignment`) goes among `taken`, the [offset, end)
// ranges of the placed buffers it meets in time, sorted by offset: the smallest gap that
// holds it (best fit), or the lowest (`lowest` true); else on top. -1 when the result
// would end above `limit`.
int64_t fit_offset(const std::vector<std::pair<int64_t, int64_t>>& taken, int64_t bytes,
                   int64_t alignment, int64_t limit, bool lowest);

// Places requests in `order`, each into the smallest gap that holds it among the placed
// buffers it overlaps in time, else on top of them. Nothing when `deadline` passes first,
// or `soft_deadline` once `finished_elsewhere` (when given) is set.
std::optional<PoolAssignment> place_in_order(
    const std::vector<PoolRequest>& requests, const std::vector<std::size_t>& order,
    int64_t default_alignment, Clock::time_point deadline,
    const std::atomic<bool>* finished_elsewhere = nullptr,
    Clock::time_point soft_deadline = Clock::time_point::max());

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

// Large-neighbourhood search from a valid placement until `deadline`, or `iterations`
// rounds when that is positive (deterministic): each round takes out the buffers of a
// time window around a buffer at the height (those inside it and the highest over that
// buffer's lifetime, up to 160) and has the exact search place them again around every
// other buffer, which keeps its offset, under the height (pool/window_search.cc). The
// height only falls; stops at `lower_bound`.
PoolAssignment window_search(const std::vector<PoolRequest>& requests, PoolAssignment start,
                             int64_t lower_bound, int64_t default_alignment,
                             Clock::time_point deadline, int64_t iterations, uint64_t seed);

}  // namespace shardplan::pool
