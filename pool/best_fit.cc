#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

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

// Past this many buffers the refining best fit (auto's) tries five more orders. Measured
// on the synthetic training traces and the SOMAS traces (docs/user-guide.md, pack on large
// inputs): none of the eight is best on all of them, and the best and worst differ by
// 0.3–20 % of the lower bound; a plan's few hundred buffers go on to the exact search.
constexpr std::size_t kMoreOrdersBuffers = 2000;

// The orders best fit takes the buffers in, each a key compared largest first, ties by
// the next key and then by index.
std::vector<std::vector<std::size_t>> placement_orders(const std::vector<PoolRequest>& requests,
                                                       bool more) {
  const auto duration = [&](std::size_t i) { return requests[i].end - requests[i].begin; };
  const auto bytes = [&](std::size_t i) { return requests[i].bytes; };
  // Each order wins somewhere on the real traces of benchmarks/minimalloc (see
  // docs/model.md): breadth on PanGu (3.3 % over the bound by size alone), duration on
  // ResNet-50, size on the challenging suite.
  const std::vector<int64_t> breadth = breadths(requests);
  std::vector<std::size_t> identity(requests.size());
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<std::size_t>> orders;
  const auto add = [&](auto first, auto second) {
    std::vector<std::size_t>& order = orders.emplace_back(identity);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (first(a) != first(b)) return first(a) > first(b);
      return second(a) > second(b);
    });
  };
  const auto octave = [&](std::size_t i) {
    return std::bit_width(static_cast<uint64_t>(duration(i)));
  };
  if (!more) {
    add([&](std::size_t i) { return breadth[i]; }, bytes);
    add(bytes, duration);
    add(duration, bytes);
    return orders;
  }
  // The orders that place the long-lived buffers first come first: their placed buffers
  // stack into few runs, so they cost the least (TakenOffsets; by start within an octave
  // of lifetimes least of all: 1.3 s on a 113 022-buffer MoE trace where size takes 42 s),
  // and on inputs where not all finish in time these are the ones that do.
  //
  // Lifetimes in octaves (or pairs of octaves), then by start, earliest first: the
  // long-lived buffers form the bottom layer, and each buffer takes the place one of its
  // kind left a micro-batch earlier (compiled MoE 1F1B traces: 0.32–0.49 % over the bound
  // where the other orders give 0.65 % and more); or then by size, which leaves fewer
  // holes under the short ones (dense 1F1B traces: 0.33–1.0 % where duration gives
  // 0.34–1.5 %).
  const auto earliest = [&](std::size_t i) { return -requests[i].begin; };
  add(octave, earliest);
  add([&](std::size_t i) { return octave(i) / 2; }, earliest);
  add(duration, bytes);
  add(octave, bytes);
  add([&](std::size_t i) { return octave(i) / 2; }, bytes);
  add([&](std::size_t i) { return breadth[i]; }, bytes);
  add(bytes, duration);
  // Sizes in octaves, longest-lived first within each (MoE traces with 64 experts).
  add([&](std::size_t i) { return std::bit_width(static_cast<uint64_t>(bytes(i))); }, duration);
  return orders;
}

class BestFitAssigner final : public OffsetAssigner {
 public:
  explicit BestFitAssigner(bool refine) : refine_(refine) {}

  std::string_view name() const override { return "best-fit"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    const auto start = pool::Clock::now();
    // With a node limit (the planner's loops) the three orders as before: a better start
    // is not always a better end for the repair that follows (on a 3 000-buffer MoE 1F1B
    // trace the eight orders start 0.016 % over the bound and 5 000 rounds of repair
    // leave it there; the three orders' start, 0.35 % over, reaches the bound in 0.05 s),
    // and the planner's packing stays what it was.
    const bool by_clock = options.node_limit <= 0;
    const std::vector<std::vector<std::size_t>> orders =
        placement_orders(requests, refine_ && by_clock && requests.size() > kMoreOrdersBuffers);
    // The orders are independent: on large inputs they share a worker per core (a plan's
    // few hundred buffers cost less than starting one). The lowest wins, the first on
    // ties, so the result does not depend on scheduling. An order still running at the
    // time limit is dropped; with eight orders none starts after 40 % of it (the rounds
    // below and the caller's local search need the rest), and those still running then
    // are dropped once any has finished. With a node limit the clock must not decide: no
    // deadline. The allocator's own time-order placement, O(n log n), stands in when none
    // finishes.
    const pool::Clock::time_point deadline = pool::deadline_of(options, start);
    const pool::Clock::time_point orders_deadline =
        by_clock && orders.size() > 3 ? start + (deadline - start) * 2 / 5 : deadline;
    std::vector<std::optional<PoolAssignment>> placed(orders.size());
    std::atomic<std::size_t> next_order{0};
    std::atomic<bool> finished_one{false};
    const auto work = [&] {
      for (std::size_t k;
           pool::Clock::now() < orders_deadline && (k = next_order++) < orders.size();) {
        placed[k] = pool::place_in_order(requests, orders[k], options.alignment, deadline,
                                         &finished_one, orders_deadline);
        if (placed[k]) finished_one = true;
      }
    };
    const std::size_t workers =
        requests.size() >= kThreadedRequests
            ? std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, orders.size())
            : 1;
    std::vector<std::future<void>> helpers;
    for (std::size_t w = 1; w < workers; ++w)
      helpers.push_back(std::async(std::launch::async, work));
    work();
    for (auto& helper : helpers) helper.get();
    std::optional<PoolAssignment> best;
    std::vector<std::size_t> best_order;
    for (std::size_t k = 0; k < orders.size(); ++k) {
      if (placed[k] && (!best || placed[k]->size_bytes < best->size_bytes)) {
        best = std::move(placed[k]);
        best_order = orders[k];
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
