#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

// A buffer to place: `bytes` live over [begin, end) (half-open: a buffer freed at t and
// one allocated at t may share bytes), at an offset that is a multiple of `alignment`
// (0: the packing's default alignment).
struct PoolRequest {
  int64_t bytes = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t alignment = 0;
};

struct PackOptions {
  int64_t alignment = 256;           // default offset alignment, bytes
  std::optional<int64_t> capacity;   // the pool may not exceed this; none = minimise only
  double time_limit_seconds = 10.0;  // wall-clock budget of the exact search
  int64_t node_limit = 0;            // > 0: also stop after this many search nodes (deterministic)
  // A height that is good enough: the searches stop on reaching it (auto passes the whole
  // input's lower bound to each independent time window, whose own bound may be lower).
  int64_t target_bytes = 0;
};

enum class PackStatus {
  solved,      // a placement within the capacity (if any)
  infeasible,  // proven: no placement fits the capacity
  not_found,   // none found within the capacity (a heuristic, or the budget ran out)
};

struct PoolAssignment {
  std::vector<int64_t> offsets;  // one per request (empty unless solved)
  int64_t size_bytes = 0;        // highest offset + bytes
  PackStatus status = PackStatus::solved;
  bool proven_optimal = false;  // no smaller pool exists
  int64_t nodes = 0;            // search nodes explored (exact)
};

// Places buffers at offsets so that no two live at once share a byte. Several algorithms
// implement it (STYLE.md §3); the event source (live intervals) stays apart.
class OffsetAssigner {
 public:
  virtual ~OffsetAssigner() = default;
  virtual std::string_view name() const = 0;
  virtual PoolAssignment assign(const std::vector<PoolRequest>& requests,
                                const PackOptions& options) const = 0;
};

// Megatron-FSDP's TracePoolAllocator rule (seeds/001, PR #4435; its design describes the
// size-descending variant): buffers taken by size, largest first, each into the
// compatible slot (no member's lifetime overlaps it) that grows least — with sizes
// descending every compatible slot grows by 0, so the tightest one (smallest, then
// lowest index) — else into a new slot; a slot is as large as its largest member and
// the pool is the sum of the slots. Past the time limit (it costs buffers x slots) the
// time-order placement (an allocator's best fit over free blocks) stands in.
std::unique_ptr<OffsetAssigner> make_slots_assigner();

// Greedy best fit: each buffer into the smallest gap between time-overlapping placed
// buffers that holds it, else on top, over three orders — decreasing breadth (most bytes
// live during the buffer's lifetime; TFLite's GreedyByBreadth), decreasing size
// (GreedyBySize) and decreasing lifetime (XLA's second order) — keeping the lowest.
// The offsets taken during a buffer's lifetime come from a segment tree over time whose
// nodes hold the placed buffers' ranges merged into runs (pool::TakenOffsets).
// `refine`: past 2 000 buffers and without a node limit five more orders (lifetime
// octaves then start or size; size octaves), then squeaky-wheel rounds (the buffers that
// ended above the lower bound go first in the next round) within half the time limit;
// auto uses it. An order still running at the time limit (refining with eight, at 40 %
// of it) is dropped; when none finishes, the time-order placement.
std::unique_ptr<OffsetAssigner> make_best_fit_assigner(bool refine = false);

// Complete branch and bound in the spirit of MiniMalloc (Moffitt, ASPLOS 2023): decides
// "fits in capacity C?" by placing buffers in canonical order (non-decreasing offset, each
// at its lowest possible offset), pruning with per-section floors plus unplaced totals
// and with dominance (never leave a gap an unplaced buffer fits below), restarting over
// several static orders with doubling node limits, solving independent time partitions
// apart; a binary search on C minimises the height (two searches with different first
// orders on two cores when only the clock bounds it). Stops at the time or node limit
// with the best found. Inputs whose instance would pass 40 M entries (pairs live at once
// plus buffer sections) are not searched: best fit, 0 nodes.
std::unique_ptr<OffsetAssigner> make_exact_assigner();

// Each independent time window (no buffer live across its ends) apart, each searched only
// down to the whole input's lower bound: slots when it already reaches it (cheap, common
// on FSDP plans); else best-fit with squeaky-wheel rounds, then, still above the bound,
// exact (up to 2 000 buffers) or, within the rest of the time limit, the window search
// and ruin-and-recreate repair on two cores (more; with a node limit repair alone); the
// best.
std::unique_ptr<OffsetAssigner> make_auto_assigner();

// Time order, each buffer into the best-fitting free block as an allocator would place
// it online: O(n log n), no search. For plans whose pool layout nothing reads (a sweep's
// evaluations under the caching allocator); not offered by name.
std::unique_ptr<OffsetAssigner> make_online_assigner();

// By name: slots, best-fit, exact, auto. nullptr for anything else.
std::unique_ptr<OffsetAssigner> make_offset_assigner(std::string_view name);
std::vector<std::string> offset_assigner_names();

// No placement can use less: the largest total of bytes live at any time, and, with
// offsets aligned to at least `alignment` (every buffer's own alignment, or this default,
// is a multiple of the smallest one, a), the largest total of live sizes rounded up to a,
// less the largest rounding of any one buffer — in a stack of aligned buffers each but
// the top one takes its size rounded up.
int64_t live_bytes_lower_bound(const std::vector<PoolRequest>& requests, int64_t alignment = 1);

// What to report when a heuristic's pool exceeds `capacity`: infeasible when even the
// lower bound does, else not found.
PackStatus over_capacity(const std::vector<PoolRequest>& requests, int64_t capacity);

// The first two requests, by index, that are live at a common time and share a byte at
// `offsets` (half-open lifetimes; zero-byte requests take no space).
std::optional<std::pair<std::size_t, std::size_t>> find_overlap(
    const std::vector<PoolRequest>& requests, const std::vector<int64_t>& offsets);

// Why a placement is wrong (MiniMalloc's ValidationResult): the kind, and a message
// naming the requests by index.
enum class PackingError { wrong_count, misaligned, outside_pool, overlap };
std::string_view packing_error_name(PackingError error);
struct PackingProblem {
  PackingError kind = PackingError::overlap;
  std::string message;
};

// Checks a placement: one aligned offset per request, inside `size_bytes`, no two
// buffers live at once sharing a byte.
std::optional<PackingProblem> check_packing(const std::vector<PoolRequest>& requests,
                                            const std::vector<int64_t>& offsets, int64_t size_bytes,
                                            int64_t default_alignment);

}  // namespace shardplan
