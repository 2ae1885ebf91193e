#include <algorithm>
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
      std::sort(taken.begin(), taken.end());
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

class BestFitAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "best-fit"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    std::vector<std::size_t> by_size(requests.size());
    std::iota(by_size.begin(), by_size.end(), 0);
    std::vector<std::size_t> by_duration = by_size;
    auto duration = [&](std::size_t i) { return requests[i].end - requests[i].begin; };
    std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) {
      if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
      return duration(a) > duration(b);
    });
    std::stable_sort(by_duration.begin(), by_duration.end(), [&](std::size_t a, std::size_t b) {
      if (duration(a) != duration(b)) return duration(a) > duration(b);
      return requests[a].bytes > requests[b].bytes;
    });
    // The two orders are independent: the second runs on another core.
    auto second = std::async(std::launch::async, [&] {
      return place_in_order(requests, by_duration, options.alignment);
    });
    PoolAssignment best = place_in_order(requests, by_size, options.alignment);
    PoolAssignment other = second.get();
    if (other.size_bytes < best.size_bytes) best = std::move(other);
    if (best.size_bytes == live_bytes_lower_bound(requests)) best.proven_optimal = true;
    if (options.capacity && best.size_bytes > *options.capacity)
      best.status = over_capacity(requests, *options.capacity);
    return best;
  }
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_best_fit_assigner() {
  return std::make_unique<BestFitAssigner>();
}

}  // namespace shardplan
