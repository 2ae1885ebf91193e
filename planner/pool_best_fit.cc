#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <future>
#include <numeric>

#include "planner/pool.h"

namespace shardplan {
namespace {

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The placed buffers, indexed by start time for overlap queries: a segment tree over the
// requests sorted by `begin`, each node holding the latest `end` among placed buffers
// below it. A query for [b, e) visits only subtrees that hold an overlapping buffer.
class PlacedIndex {
 public:
  explicit PlacedIndex(const std::vector<PoolRequest>& requests) : requests_(requests) {
    by_begin_.resize(requests.size());
    std::iota(by_begin_.begin(), by_begin_.end(), 0);
    std::stable_sort(by_begin_.begin(), by_begin_.end(), [&](std::size_t a, std::size_t b) {
      return requests[a].begin < requests[b].begin;
    });
    position_.resize(requests.size());
    for (std::size_t p = 0; p < by_begin_.size(); ++p) position_[by_begin_[p]] = p;
    size_ = 1;
    while (size_ < requests.size()) size_ *= 2;
    max_end_.assign(2 * size_, kEmpty);
  }

  void place(std::size_t request) {
    std::size_t node = size_ + position_[request];
    max_end_[node] = requests_[request].end;
    for (node /= 2; node >= 1; node /= 2)
      max_end_[node] = std::max(max_end_[2 * node], max_end_[2 * node + 1]);
  }

  // Placed requests live at some time in [begin, end).
  void overlapping(int64_t begin, int64_t end, std::vector<std::size_t>& out) const {
    out.clear();
    // Only positions whose begin is before `end` can overlap.
    const auto limit = static_cast<std::size_t>(
        std::lower_bound(by_begin_.begin(), by_begin_.end(), end,
                         [&](std::size_t r, int64_t t) { return requests_[r].begin < t; }) -
        by_begin_.begin());
    if (limit > 0) collect(1, 0, size_, limit, begin, out);
  }

 private:
  static constexpr int64_t kEmpty = INT64_MIN;

  void collect(std::size_t node, std::size_t lo, std::size_t hi, std::size_t limit, int64_t begin,
               std::vector<std::size_t>& out) const {
    if (lo >= limit || max_end_[node] <= begin) return;
    if (hi - lo == 1) {
      out.push_back(by_begin_[lo]);
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    collect(2 * node, lo, mid, limit, begin, out);
    collect(2 * node + 1, mid, hi, limit, begin, out);
  }

  const std::vector<PoolRequest>& requests_;
  std::vector<std::size_t> by_begin_;
  std::vector<std::size_t> position_;
  std::size_t size_ = 1;
  std::vector<int64_t> max_end_;
};

// Places requests in `order`, each into the smallest gap that holds it among the placed
// buffers it overlaps in time, else on top of them.
PoolAssignment place_in_order(const std::vector<PoolRequest>& requests,
                              const std::vector<std::size_t>& order, int64_t default_alignment) {
  PoolAssignment out;
  out.offsets.assign(requests.size(), 0);
  PlacedIndex index(requests);
  std::vector<std::size_t> neighbours;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of the neighbours
  for (std::size_t i : order) {
    const PoolRequest& r = requests[i];
    const int64_t alignment = r.alignment > 0 ? r.alignment : default_alignment;
    int64_t best = -1;
    int64_t best_gap = INT64_MAX;
    int64_t cursor = 0;
    if (r.bytes > 0 && r.begin < r.end) {
      index.overlapping(r.begin, r.end, neighbours);
      taken.clear();
      for (std::size_t n : neighbours)
        taken.emplace_back(out.offsets[n], out.offsets[n] + requests[n].bytes);
      std::sort(taken.begin(), taken.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [start, stop] : taken) {
        const int64_t candidate = round_up(cursor, alignment);
        if (start > candidate && start - candidate >= r.bytes && start - cursor < best_gap) {
          best = candidate;
          best_gap = start - cursor;
        }
        cursor = std::max(cursor, stop);
      }
    }
    out.offsets[i] = best >= 0 ? best : round_up(cursor, alignment);
    out.size_bytes = std::max(out.size_bytes, out.offsets[i] + r.bytes);
    if (r.bytes > 0 && r.begin < r.end) index.place(i);
  }
  return out;
}

// The most bytes live at any time in each request's lifetime ("breadth"): a prefix sweep
// over the distinct times, then a sparse table for the range maxima.
std::vector<int64_t> breadths(const std::vector<PoolRequest>& requests) {
  std::vector<int64_t> times;
  times.reserve(2 * requests.size());
  for (const PoolRequest& r : requests) {
    times.push_back(r.begin);
    times.push_back(r.end);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
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
    const auto start = std::chrono::steady_clock::now();
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
    // so the result does not depend on scheduling.
    const auto policy =
        requests.size() >= kThreadedRequests ? std::launch::async : std::launch::deferred;
    const std::array<const std::vector<std::size_t>*, 3> orders = {&by_breadth, &by_size,
                                                                   &by_duration};
    std::vector<std::future<PoolAssignment>> runs;
    for (const std::vector<std::size_t>* order : orders) {
      runs.push_back(std::async(policy, [&requests, order, &options] {
        return place_in_order(requests, *order, options.alignment);
      }));
    }
    PoolAssignment best = runs.front().get();
    std::vector<std::size_t> best_order = by_breadth;
    for (std::size_t k = 1; k < runs.size(); ++k) {
      PoolAssignment other = runs[k].get();
      if (other.size_bytes < best.size_bytes) {
        best = std::move(other);
        best_order = *orders[k];
      }
    }
    const int64_t bound = live_bytes_lower_bound(requests, options.alignment);
    if (refine_) {
      // Squeaky wheel (Joslin & Clements 1999): the buffers that ended above the lower
      // bound go first next time, the rest keep their order. On PanGu 2.6B one round takes
      // the pool from 0.76 % over the bound to the bound. Stops at the bound, after two
      // rounds without gain, after eight rounds, or at half the time limit (the clock only
      // without a node limit: the planner's packing must not depend on it).
      const auto budget = std::chrono::duration<double>(options.time_limit_seconds / 2);
      std::vector<std::size_t> order = best_order;
      PoolAssignment current = best;
      const bool by_clock = options.node_limit <= 0;
      for (int stale = 0, round = 0;
           stale < 2 && round < 8 && best.size_bytes > bound &&
           (!by_clock || std::chrono::steady_clock::now() - start < budget);
           ++round) {
        std::vector<std::size_t> promoted, rest;
        for (std::size_t i : order) {
          (current.offsets[i] + requests[i].bytes > bound ? promoted : rest).push_back(i);
        }
        order = std::move(promoted);
        order.insert(order.end(), rest.begin(), rest.end());
        current = place_in_order(requests, order, options.alignment);
        if (current.size_bytes < best.size_bytes) {
          best = current;
          stale = 0;
        } else {
          ++stale;
        }
      }
    }
    if (best.size_bytes == bound) best.proven_optimal = true;
    if (options.capacity && best.size_bytes > *options.capacity)
      best.status = over_capacity(requests, *options.capacity);
    return best;
  }

 private:
  bool refine_;
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_best_fit_assigner(bool refine) {
  return std::make_unique<BestFitAssigner>(refine);
}

}  // namespace shardplan
