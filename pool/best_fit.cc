#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <future>
#include <numeric>

#include "pool/placement.h"
#include "pool/pool.h"

namespace shardplan {
namespace {

// The most bytes live at any time in each request's lifetime ("breadth"): a prefix sweep
// over the distinct times, then a sparse table for the range maxima.
std::vector<int64_t> breadths(const std::vector<PoolRequest>& requests) {
  const std::vector<int64_t> times = pool::distinct_times(requests);
  auto index = [&](int64_t t) {
    return static_cast<std::size_t>(std::lower_bound(times.begin(), times.end(), t) -
                                    times.begin());
  };
  std::vector<int64_t> live(times.size() + 1, 0);
  for (const PoolRequest& r : requests) {
    if (r.bytes <= 0 || r.begin >= r.end) continue;
    live[index(r.begin)] += r.bytes;
    live[index(r.end)] -= r.bytes;
  }
  for (std::size_t k = 1; k < live.size(); ++k) live[k] += live[k - 1];
  std::vector<std::vector<int64_t>> table = {live};
  for (std::size_t width = 2; width <= live.size(); width *= 2) {
    const std::vector<int64_t>& prev = table.back();
    std::vector<int64_t> next(live.size() - width + 1);
    for (std::size_t k = 0; k < next.size(); ++k) next[k] = std::max(prev[k], prev[k + width / 2]);
    table.push_back(std::move(next));
  }
  std::vector<int64_t> out(requests.size(), 0);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PoolRequest& r = requests[i];
    if (r.bytes <= 0 || r.begin >= r.end) continue;
    const std::size_t lo = index(r.begin);
    const std::size_t hi = index(r.end);  // sections [lo, hi)
    const auto level = static_cast<std::size_t>(std::bit_width(hi - lo) - 1);
    out[i] = std::max(table[level][lo], table[level][hi - (std::size_t{1} << level)]);
  }
  return out;
}

constexpr std::size_t kThreadedRequests = 2048;

class BestFitAssigner final : public OffsetAssigner {
 public:
  explicit BestFitAssigner(bool refine) : refine_(refine) {}

  std::string_view name() const override { return "best-fit"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    const auto start = pool::Clock::now();
    std::vector<std::size_t> by_breadth(requests.size());
    std::iota(by_breadth.begin(), by_breadth.end(), 0);
    std::vector<std::size_t> by_size = by_breadth;
    std::vector<std::size_t> by_duration = by_breadth;
    auto duration = [&](std::size_t i) { return requests[i].end - requests[i].begin; };
    auto bytes = [&](std::size_t i) { return requests[i].bytes; };
    // Each order wins somewhere on the real traces of benchmarks/minimalloc (see
    // docs/model.md): breadth on PanGu (3.3 % over the bound by size alone), duration on
    // ResNet-50, size on the challenging suite.
    const std::vector<int64_t> breadth = breadths(requests);
    auto sort_by = [](std::vector<std::size_t>& order, auto first, auto second) {
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (first(a) != first(b)) return first(a) > first(b);
        return second(a) > second(b);
      });
    };
    sort_by(
        by_breadth, [&](std::size_t i) { return breadth[i]; }, bytes);
    sort_by(by_size, bytes, duration);
    sort_by(by_duration, duration, bytes);
    // The orders are independent: on large inputs each gets its own thread (a plan's few
    // hundred buffers cost less than starting one). The lowest wins, the first on ties,
    // so the result does not depend on scheduling. An order still running at the time
    // limit is dropped (with a node limit the clock must not decide: no deadline); the
    // allocator's own time-order placement, O(n log n), stands in when none finishes.
    const bool by_clock = options.node_limit <= 0;
    const pool::Clock::time_point deadline = pool::deadline_of(options, start);
    const auto policy =
        requests.size() >= kThreadedRequests ? std::launch::async : std::launch::deferred;
    const std::array<const std::vector<std::size_t>*, 3> orders = {&by_breadth, &by_size,
                                                                   &by_duration};
    std::vector<std::future<std::optional<PoolAssignment>>> runs;
    for (const std::vector<std::size_t>* order : orders) {
      runs.push_back(std::async(policy, [&requests, order, &options, deadline] {
        return pool::place_in_order(requests, *order, options.alignment, deadline);
      }));
    }
    std::optional<PoolAssignment> best;
    std::vector<std::size_t> best_order;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      std::optional<PoolAssignment> other = runs[k].get();
      if (other && (!best || other->size_bytes < best->size_bytes)) {
        best = std::move(other);
        best_order = *orders[k];
      }
    }
    if (!best) best = pool::place_online(requests, options.alignment);
    const int64_t bound = live_bytes_lower_bound(requests, options.alignment);
    if (refine_ && !best_order.empty()) {
      // Squeaky wheel (Joslin & Clements 1999): the buffers that ended above the lower
      // bound go first next time, the rest keep their order. On PanGu 2.6B one round takes
      // the pool from 0.76 % over the bound to the bound. Stops at the bound, after two
      // rounds without gain, after eight rounds, or at half the time limit (the clock only
      // without a node limit: the planner's packing must not depend on it).
      const pool::Clock::time_point half =
          by_clock ? start + (deadline - start) / 2 : pool::Clock::time_point::max();
      std::vector<std::size_t> order = best_order;
      PoolAssignment current = *best;
      for (int stale = 0, round = 0;
           stale < 2 && round < 8 && best->size_bytes > bound && pool::Clock::now() < half;
           ++round) {
        std::vector<std::size_t> promoted, rest;
        for (std::size_t i : order) {
          (current.offsets[i] + requests[i].bytes > bound ? promoted : rest).push_back(i);
        }
        order = std::move(promoted);
        order.insert(order.end(), rest.begin(), rest.end());
        std::optional<PoolAssignment> next =
            pool::place_in_order(requests, order, options.alignment, half);
        if (!next) break;
        current = std::move(*next);
        if (current.size_bytes < best->size_bytes) {
          best = current;
          stale = 0;
        } else {
          ++stale;
        }
      }
    }
    return pool::with_status(requests, std::move(*best), bound, options);
  }

 private:
  bool refine_;
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_best_fit_assigner(bool refine) {
  return std::make_unique<BestFitAssigner>(refine);
}

}  // namespace shardplan
