// The exact search (pool/exact.h): decides a capacity by branch and bound over the
// sections, and minimises the pool by probing capacities.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "pool/exact.h"
#include "pool/placement.h"
#include "pool/pool.h"

namespace shardplan {
namespace {

using namespace pool;  // the instance (exact.h) and the placement helpers

using Clock = std::chrono::steady_clock;

// Concurrent minimisations bisect on their own (sharing bounds would change which
// capacities each probes, and that is what makes one of them lucky); they share only the
// news that the optimum is proven, which stops them all.
struct Shared {
  std::atomic<bool> done{false};
};

enum class Outcome { found, exhausted, aborted };

// Above this many sections touched by one placement, the floor refinement is skipped.
constexpr std::size_t kMaxFloorSections = 1024;

// Decides whether one partition fits under `capacity`. Every placement may cut the
// remaining problem in two: where no unplaced buffer crosses a section boundary, the
// two sides no longer interact and are solved one after the other (dynamic temporal
// decomposition), which keeps a failure on one side from re-searching the other.
class Search {
 public:
  Search(const Instance& in, int64_t capacity, const Heuristic& heuristic,
         Clock::time_point deadline, int64_t* nodes_left, int64_t* nodes, const Shared* shared)
      : in_(in),
        capacity_(capacity),
        heuristic_(heuristic),
        deadline_(deadline),
        nodes_left_(*nodes_left),
        nodes_(*nodes),
        shared_(shared) {}

  Outcome run(const std::vector<int32_t>& buffers, std::pair<int32_t, int32_t> sections,
              std::vector<int64_t>& offsets) {
    const auto n = in_.size.size();
    const auto num_sections = in_.in_section.size();
    offset_.assign(n, -1);
    solution_.assign(n, -1);
    min_offset_.assign(n, 0);
    rank_.assign(n, 0);
    floor_.assign(num_sections, 0);
    total_.assign(num_sections, 0);
    cuts_.assign(num_sections + 1, 0);
    section_stamp_.assign(num_sections, 0);
    for (int32_t b : buffers) {
      const auto i = static_cast<std::size_t>(b);
      for (int64_t s = in_.section_lo[i]; s < in_.section_hi[i]; ++s)
        total_[static_cast<std::size_t>(s)] += in_.size[i];
      min_offset_[i] = lowest_fit(i, 0);
      // Boundary k sits between sections k - 1 and k.
      for (int64_t k = in_.section_lo[i] + 1; k < in_.section_hi[i]; ++k)
        ++cuts_[static_cast<std::size_t>(k)];
    }
    for (int32_t s = sections.first; s < sections.second; ++s) {
      const auto si = static_cast<std::size_t>(s);
      if (total_[si] + blocked_bytes(si, 0) > capacity_) return Outcome::exhausted;
    }
    rank(buffers);
    const Outcome outcome = dfs(buffers, sections, -1, -1);
    if (outcome == Outcome::found) {
      for (int32_t b : buffers)
        offsets[static_cast<std::size_t>(b)] = solution_[static_cast<std::size_t>(b)];
    }
    return outcome;
  }

 private:
  struct Candidate {
    int64_t offset;
    int32_t rank;
    int32_t buffer;
  };

  Outcome dfs(const std::vector<int32_t>& buffers, std::pair<int32_t, int32_t> sections,
              int64_t last_offset, int32_t last_rank) {
    if (--nodes_left_ < 0) return Outcome::aborted;
    ++nodes_;
    // A node of a large instance costs microseconds; the clock costs nanoseconds.
    if (Clock::now() > deadline_) return Outcome::aborted;
    if (shared_ != nullptr && shared_->done.load(std::memory_order_relaxed))
      return Outcome::aborted;
    int64_t min_height = INT64_MAX;
    bool any = false;
    for (int32_t b : buffers) {
      const auto i = static_cast<std::size_t>(b);
      if (offset_[i] >= 0) continue;
      any = true;
      min_height = std::min(min_height, min_offset_[i] + in_.size[i]);
    }
    if (!any) return Outcome::found;
    // Only buffers between the last offset (canonical order) and the lowest reachable top
    // (dominance) are candidates; on large instances that is a handful of thousands.
    std::vector<Candidate> candidates;
    for (int32_t b : buffers) {
      const auto i = static_cast<std::size_t>(b);
      if (offset_[i] >= 0 || min_offset_[i] < last_offset || min_offset_[i] >= min_height) continue;
      candidates.push_back({min_offset_[i], rank_[i], b});
    }
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.offset != b.offset ? a.offset < b.offset : a.rank < b.rank;
    });
    for (const Candidate& c : candidates) {
      // Canonical order: non-decreasing (offset, rank).
      if (c.offset < last_offset || (c.offset == last_offset && c.rank < last_rank)) continue;
      // Dominance: placing it here would leave room below for some unplaced buffer.
      if (c.offset >= min_height) break;
      const auto i = static_cast<std::size_t>(c.buffer);
      const int64_t top = c.offset + in_.size[i];
      if (top > capacity_) continue;
      const Outcome outcome = place_and_descend(buffers, sections, c, top);
      if (outcome != Outcome::exhausted) return outcome;
    }
    return Outcome::exhausted;
  }

  Outcome place_and_descend(const std::vector<int32_t>& buffers,
                            std::pair<int32_t, int32_t> sections, const Candidate& c, int64_t top) {
    const auto i = static_cast<std::size_t>(c.buffer);
    offset_[i] = c.offset;
    solution_[i] = c.offset;
    const std::size_t offset_mark = offset_changes_.size();
    const std::size_t floor_mark = floor_changes_.size();
    ++stamp_;
    for (int64_t s = in_.section_lo[i]; s < in_.section_hi[i]; ++s) {
      const auto si = static_cast<std::size_t>(s);
      floor_changes_.push_back({static_cast<int32_t>(s), floor_[si]});
      floor_[si] = top;
      total_[si] -= in_.size[i];
    }
    std::vector<int32_t>& touched = touched_sections_;
    touched.clear();
    for (int32_t j : in_.overlaps[i]) {
      const auto o = static_cast<std::size_t>(j);
      if (offset_[o] >= 0 || min_offset_[o] >= top) continue;
      offset_changes_.push_back({j, min_offset_[o]});
      min_offset_[o] = lowest_fit(o, top);
      if (touched.size() > kMaxFloorSections) continue;
      for (int64_t s = in_.section_lo[o]; s < in_.section_hi[o]; ++s) {
        if (section_stamp_[static_cast<std::size_t>(s)] != stamp_) {
          section_stamp_[static_cast<std::size_t>(s)] = stamp_;
          touched.push_back(static_cast<int32_t>(s));
        }
      }
    }
    // A section's floor is at least the lowest offset any of its unplaced buffers can
    // take. Only a strengthening of the pruning, so it is skipped where it would cost
    // more than it saves: a placement that moves buffers spanning thousands of sections.
    if (touched.size() > kMaxFloorSections) touched.clear();
    for (int32_t s : touched) {
      const auto si = static_cast<std::size_t>(s);
      int64_t lowest = INT64_MAX;
      for (int32_t b : in_.in_section[si]) {
        if (offset_[static_cast<std::size_t>(b)] < 0)
          lowest = std::min(lowest, min_offset_[static_cast<std::size_t>(b)]);
      }
      if (lowest != INT64_MAX && floor_[si] < lowest) {
        floor_changes_.push_back({s, floor_[si]});
        floor_[si] = lowest;
      }
    }
    Outcome outcome = Outcome::exhausted;
    if (feasible(sections, c.offset)) outcome = decompose_and_descend(buffers, sections, c);
    for (int64_t s = in_.section_lo[i]; s < in_.section_hi[i]; ++s)
      total_[static_cast<std::size_t>(s)] += in_.size[i];
    while (floor_changes_.size() > floor_mark) {
      floor_[static_cast<std::size_t>(floor_changes_.back().first)] = floor_changes_.back().second;
      floor_changes_.pop_back();
    }
    while (offset_changes_.size() > offset_mark) {
      min_offset_[static_cast<std::size_t>(offset_changes_.back().first)] =
          offset_changes_.back().second;
      offset_changes_.pop_back();
    }
    offset_[i] = -1;
    return outcome;
  }

  Outcome decompose_and_descend(const std::vector<int32_t>& buffers,
                                std::pair<int32_t, int32_t> sections, const Candidate& c) {
    const auto i = static_cast<std::size_t>(c.buffer);
    std::vector<int32_t> cutpoints = {sections.first};
    for (int64_t k = in_.section_lo[i] + 1; k < in_.section_hi[i]; ++k) {
      if (--cuts_[static_cast<std::size_t>(k)] == 0 && k > sections.first && k < sections.second) {
        cutpoints.push_back(static_cast<int32_t>(k));
      }
    }
    Outcome outcome = Outcome::found;
    if (cutpoints.size() == 1) {
      outcome = dfs(buffers, sections, c.offset, c.rank);
    } else {
      cutpoints.push_back(sections.second);
      for (std::size_t k = 1; k < cutpoints.size() && outcome == Outcome::found; ++k) {
        const std::pair<int32_t, int32_t> part = {cutpoints[k - 1], cutpoints[k]};
        std::vector<int32_t> inside;
        for (int32_t b : buffers) {
          const auto o = static_cast<std::size_t>(b);
          if (offset_[o] >= 0) continue;
          if (in_.section_hi[o] > part.first && in_.section_lo[o] < part.second)
            inside.push_back(b);
        }
        if (!inside.empty()) {
          // A fresh subproblem gets a fresh static order, by the totals left in it.
          std::vector<int32_t> saved;
          for (int32_t b : inside) saved.push_back(rank_[static_cast<std::size_t>(b)]);
          rank(inside);
          outcome = dfs(inside, part, -1, -1);
          for (std::size_t m = 0; m < inside.size(); ++m)
            rank_[static_cast<std::size_t>(inside[m])] = saved[m];
        }
      }
    }
    for (int64_t k = in_.section_lo[i] + 1; k < in_.section_hi[i]; ++k)
      ++cuts_[static_cast<std::size_t>(k)];
    return outcome;
  }

  void rank(const std::vector<int32_t>& buffers) {
    const std::vector<int32_t> order = preorder(in_, buffers, total_, heuristic_);
    for (std::size_t k = 0; k < order.size(); ++k)
      rank_[static_cast<std::size_t>(order[k])] = static_cast<int32_t>(k);
  }

  // Every remaining buffer goes at or above `offset` (canonical order) and above each
  // section's floor, so each section needs its floor plus its unplaced bytes (plus what
  // fixed buffers take between the floor and the capacity).
  bool feasible(std::pair<int32_t, int32_t> sections, int64_t offset) const {
    for (int32_t s = sections.first; s < sections.second; ++s) {
      const auto si = static_cast<std::size_t>(s);
      if (total_[si] == 0) {
        if (floor_[si] > capacity_) return false;
        continue;
      }
      const int64_t floor = std::max(floor_[si], offset);
      if (floor + total_[si] + blocked_bytes(si, floor) > capacity_) return false;
    }
    return true;
  }

  // The lowest offset at or above `from` where buffer i fits between the fixed buffers
  // live with it (Instance::fits), aligned.
  int64_t lowest_fit(std::size_t i, int64_t from) const {
    int64_t at = round_up(from, in_.alignment[i]);
    if (in_.fits.empty()) return at;
    const auto& fits = in_.fits[i];
    auto it =
        std::lower_bound(fits.begin(), fits.end(), at + in_.size[i],
                         [](const auto& range, int64_t value) { return range.second < value; });
    for (; it != fits.end(); ++it) {
      at = round_up(std::max(at, it->first), in_.alignment[i]);
      if (at <= it->second - in_.size[i]) return at;
    }
    return at;  // not reached: the last range is open
  }

  // Bytes fixed buffers take in section s between `floor` and the capacity.
  int64_t blocked_bytes(std::size_t s, int64_t floor) const {
    if (in_.section_blocked.empty() || floor >= capacity_) return 0;
    const auto& ranges = in_.section_blocked[s];
    const auto& before = in_.section_blocked_before[s];
    const auto lo = static_cast<std::size_t>(
        std::upper_bound(ranges.begin(), ranges.end(), floor,
                         [](int64_t value, const auto& range) { return value < range.second; }) -
        ranges.begin());
    const auto hi = static_cast<std::size_t>(
        std::lower_bound(ranges.begin(), ranges.end(), capacity_,
                         [](const auto& range, int64_t value) { return range.first < value; }) -
        ranges.begin());
    if (lo >= hi) return 0;
    return before[hi] - before[lo] - std::max<int64_t>(0, floor - ranges[lo].first) -
           std::max<int64_t>(0, ranges[hi - 1].second - capacity_);
  }

  const Instance& in_;
  int64_t capacity_;
  Heuristic heuristic_;
  Clock::time_point deadline_;
  int64_t& nodes_left_;
  int64_t& nodes_;
  const Shared* shared_;
  std::vector<int64_t> offset_, min_offset_, solution_, floor_, total_;
  std::vector<int32_t> rank_, cuts_;
  std::vector<int64_t> section_stamp_;
  int64_t stamp_ = 0;
  std::vector<int32_t> touched_sections_;
  std::vector<std::pair<int32_t, int64_t>> offset_changes_, floor_changes_;
};

// Decides one capacity for all partitions; `offsets` is filled when the answer is yes.
Outcome decide(const Instance& in, int64_t capacity, Clock::time_point deadline,
               int64_t node_budget, int64_t& nodes, std::vector<int64_t>& offsets,
               std::size_t rotation, const Shared* shared) {
  for (std::size_t p = 0; p < in.partitions.size(); ++p) {
    const auto& buffers = in.partitions[p];
    if (buffers.empty()) continue;

    // Restarts with doubling node limits, round robin over the static orders.
    int64_t limit = static_cast<int64_t>(buffers.size());
    Outcome outcome = Outcome::aborted;
    while (outcome == Outcome::aborted) {
      // The other search finished: every restart would stop at its first node.
      if (shared != nullptr && shared->done.load(std::memory_order_relaxed))
        return Outcome::aborted;
      limit = limit > INT64_MAX / 2 ? INT64_MAX : limit * 2;
      for (std::size_t k = 0; k < kHeuristics.size(); ++k) {
        const Heuristic& heuristic = kHeuristics[(k + rotation) % kHeuristics.size()];
        int64_t left = node_budget > 0 ? std::min(limit, node_budget - nodes) : limit;
        if (left <= 0 || Clock::now() > deadline) return Outcome::aborted;
        const bool capped = left < limit;
        Search search(in, capacity, heuristic, deadline, &left, &nodes, shared);
        outcome = search.run(buffers, in.partition_sections[p], offsets);
        if (outcome != Outcome::aborted) break;
        if (capped || Clock::now() > deadline) return Outcome::aborted;
      }
    }
    if (outcome == Outcome::exhausted) return Outcome::exhausted;
  }
  return Outcome::found;
}

struct Trajectory {
  std::vector<int64_t> offsets;  // empty unless it found a placement
  int64_t height = INT64_MAX;
  int64_t proven_below = 0;  // no placement is lower than this
  int64_t nodes = 0;
};

// Feasibility is monotone in the capacity: probe the lower bound first (tight instances
// end there), then bisect between what is known to fit and what is not. A probe that runs
// out of budget proves nothing; the bisection moves up past it, and when it runs out of
// room a new pass starts again from the proven bound with twice the time per probe, so a
// long limit is spent on the hard capacities, not lost on one. With a node budget the run
// must not depend on the clock: one pass, the probes share the nodes and the time limit
// stays only a safety net. `rotation` picks the static order tried first.
Trajectory minimise(const Instance& in, const std::vector<PoolRequest>& requests,
                    const PackOptions& options, int64_t lower_bound, int64_t initial_hi,
                    Clock::time_point start, Clock::time_point deadline, std::size_t rotation,
                    Shared& shared) {
  Trajectory t{.proven_below = lower_bound};
  std::vector<int64_t> offsets(requests.size(), 0);
  const bool by_nodes = options.node_limit > 0;
  auto probe_time = (deadline - start) / 8;
  int64_t hi = initial_hi;
  // Below the target nothing is wanted: probes start there.
  const auto floor = [&] { return std::max(t.proven_below, options.target_bytes); };
  for (int pass = 0; floor() <= hi && Clock::now() < deadline; ++pass) {
    if ((by_nodes && pass > 0) || shared.done.load()) break;
    int64_t lo = floor();
    for (bool first = true; lo <= hi && Clock::now() < deadline; first = false) {
      const int64_t probe = first ? lo : lo + (hi - lo) / 2;
      // Most instances fit at the lower bound: it gets twice the time of the others.
      const auto probe_deadline =
          by_nodes ? deadline : std::min(deadline, Clock::now() + (first ? 2 : 1) * probe_time);
      const Outcome outcome = decide(in, probe, probe_deadline, options.node_limit, t.nodes,
                                     offsets, rotation, by_nodes ? nullptr : &shared);
      if (outcome == Outcome::found) {
        t.offsets = offsets;
        t.height = 0;
        for (std::size_t i = 0; i < requests.size(); ++i)
          t.height = std::max(t.height, offsets[i] + requests[i].bytes);
        hi = t.height - 1;
      } else {
        // Infeasible at `probe` means infeasible at every smaller capacity too.
        if (outcome == Outcome::exhausted) t.proven_below = std::max(t.proven_below, probe + 1);
        lo = probe + 1;
      }
      if (by_nodes && t.nodes >= options.node_limit) break;
    }
    probe_time *= 2;
  }
  // Proven optimal, or the target reached: the others may stop.
  if (floor() > hi) shared.done = true;
  return t;
}

class ExactAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "exact"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options.time_limit_seconds));
    // An upper bound to start from: best fit is fast and usually close.
    PoolAssignment best = make_best_fit_assigner()->assign(
        requests, PackOptions{.alignment = options.alignment,
                              .time_limit_seconds = options.time_limit_seconds,
                              .node_limit = options.node_limit});
    best.status = PackStatus::solved;
    best.nodes = 0;
    const int64_t lower_bound =
        live_bytes_lower_bound(requests, options.alignment);  // nothing smaller fits
    // The search keeps every pair of buffers live at once and every buffer's sections: on
    // inputs where that is hundreds of millions of entries it could not start in time or
    // memory, and best fit is the answer.
    if (instance_entries(requests) > kMaxInstanceEntries || Clock::now() > deadline) {
      best = pool::with_status(requests, std::move(best), lower_bound, options);
      if (best.status != PackStatus::solved) best.offsets.clear();
      return best;
    }
    const Instance in = prepare(requests, options.alignment);
    int64_t hi = best.size_bytes - 1;
    if (options.capacity) hi = std::min(hi, *options.capacity);
    Shared shared;
    // How hard a capacity is to decide depends erratically on the order tried first (on
    // challenging D, starting with "TWA" reaches 1031168 in 6 s where "WAT" stalls at
    // 1045504), so a clock-bound run sends a second minimisation with another first order
    // to the second core. A node-bound run stays one deterministic trajectory.
    std::vector<std::future<Trajectory>> runs;
    const std::size_t trajectories =
        options.node_limit > 0
            ? 1
            : std::min<std::size_t>(2, std::max(1u, std::thread::hardware_concurrency()));
    for (std::size_t k = 0; k < trajectories; ++k) {
      runs.push_back(std::async(k == 0 ? std::launch::deferred : std::launch::async, [&, k] {
        return minimise(in, requests, options, lower_bound, hi, start, deadline, 2 * k, shared);
      }));
    }
    // The first runs on this thread; ties go to the first, for the same result on reruns
    // whenever both finish.
    int64_t proven_below = lower_bound;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      Trajectory t = runs[k].get();
      best.nodes += t.nodes;
      proven_below = std::max(proven_below, t.proven_below);
      if (t.height < best.size_bytes) {
        best.size_bytes = t.height;
        best.offsets = std::move(t.offsets);
      }
    }
    best.proven_optimal = proven_below >= best.size_bytes;
    if (options.capacity && best.size_bytes > *options.capacity) {
      best.status =
          proven_below > *options.capacity ? PackStatus::infeasible : PackStatus::not_found;
      best.offsets.clear();
    }
    return best;
  }
};

}  // namespace

namespace pool {
std::vector<int64_t> place_around_fixed(const Instance& in, int64_t capacity, int64_t node_limit,
                                        std::size_t rotation, Clock::time_point deadline) {
  std::vector<int64_t> offsets(in.size.size(), -1);
  int64_t nodes = 0;
  if (decide(in, capacity, deadline, node_limit, nodes, offsets, rotation, nullptr) !=
      Outcome::found)
    offsets.clear();
  return offsets;
}

}  // namespace pool

std::unique_ptr<OffsetAssigner> make_exact_assigner() {
  return std::make_unique<ExactAssigner>();
}

}  // namespace shardplan
