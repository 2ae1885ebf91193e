#include "planner/pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

namespace shardplan {

int64_t live_bytes_lower_bound(const std::vector<PoolRequest>& requests, int64_t alignment) {
  int64_t a = INT64_MAX;
  for (const PoolRequest& r : requests) a = std::min(a, r.alignment > 0 ? r.alignment : alignment);
  a = std::max<int64_t>(a == INT64_MAX ? 1 : a, 1);
  // Sweep: at equal times frees come before allocations (half-open intervals).
  std::vector<std::tuple<int64_t, int64_t, int64_t>> events;  // time, bytes, rounded
  events.reserve(2 * requests.size());
  int64_t largest_pad = 0;
  for (const PoolRequest& r : requests) {
    if (r.bytes <= 0 || r.begin >= r.end) continue;
    const int64_t rounded = (r.bytes + a - 1) / a * a;
    largest_pad = std::max(largest_pad, rounded - r.bytes);
    events.emplace_back(r.begin, r.bytes, rounded);
    events.emplace_back(r.end, -r.bytes, -rounded);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, live_rounded = 0, peak = 0, peak_rounded = 0;
  for (const auto& [time, delta, delta_rounded] : events) {
    live += delta;
    live_rounded += delta_rounded;
    peak = std::max(peak, live);
    peak_rounded = std::max(peak_rounded, live_rounded);
  }
  return std::max(peak, peak_rounded - largest_pad);
}

PackStatus over_capacity(const std::vector<PoolRequest>& requests, int64_t capacity) {
  return live_bytes_lower_bound(requests) > capacity ? PackStatus::infeasible
                                                     : PackStatus::not_found;
}

std::optional<std::pair<std::size_t, std::size_t>> find_overlap(
    const std::vector<PoolRequest>& requests, const std::vector<int64_t>& offsets) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].bytes > 0 && requests[i].begin < requests[i].end) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].begin != requests[b].begin ? requests[a].begin < requests[b].begin : a < b;
  });
  // Sweep over time keeping the live buffers by offset: when the placement is valid the
  // live buffers are disjoint, so a newcomer meets at most its neighbours.
  std::multimap<int64_t, std::size_t> live_by_offset;
  std::multimap<int64_t, std::size_t> live_by_end;
  auto overlaps = [&](std::size_t a, std::size_t b) {
    return offsets[a] < offsets[b] + requests[b].bytes &&
           offsets[b] < offsets[a] + requests[a].bytes;
  };
  for (std::size_t i : order) {
    while (!live_by_end.empty() && live_by_end.begin()->first <= requests[i].begin) {
      const std::size_t done = live_by_end.begin()->second;
      live_by_end.erase(live_by_end.begin());
      for (auto [it, last] = live_by_offset.equal_range(offsets[done]); it != last; ++it) {
        if (it->second == done) {
          live_by_offset.erase(it);
          break;
        }
      }
    }
    auto next = live_by_offset.lower_bound(offsets[i]);
    for (auto it = next; it != live_by_offset.end() && it->first < offsets[i] + requests[i].bytes;
         ++it) {
      if (overlaps(it->second, i)) return std::pair{it->second, i};
    }
    if (next != live_by_offset.begin() && overlaps(std::prev(next)->second, i)) {
      return std::pair{std::prev(next)->second, i};
    }
    live_by_offset.emplace(offsets[i], i);
    live_by_end.emplace(requests[i].end, i);
  }
  return std::nullopt;
}

std::optional<std::string> check_packing(const std::vector<PoolRequest>& requests,
                                         const std::vector<int64_t>& offsets, int64_t size_bytes,
                                         int64_t default_alignment) {
  if (offsets.size() != requests.size()) {
    return fmt::format("{} offsets for {} buffers", offsets.size(), requests.size());
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PoolRequest& r = requests[i];
    const int64_t alignment = r.alignment > 0 ? r.alignment : default_alignment;
    if (offsets[i] < 0 || (alignment > 0 && offsets[i] % alignment != 0)) {
      return fmt::format("buffer {} at offset {} is not aligned to {}", i, offsets[i], alignment);
    }
    if (offsets[i] + r.bytes > size_bytes) {
      return fmt::format("buffer {} ends at {}, past the pool of {}", i, offsets[i] + r.bytes,
                         size_bytes);
    }
  }
  if (auto pair = find_overlap(requests, offsets)) {
    const auto [a, b] = *pair;
    return fmt::format(
        "buffers {} [{}, {}) and {} [{}, {}) share bytes while both are live (times [{}, {}) and "
        "[{}, {}))",
        a, offsets[a], offsets[a] + requests[a].bytes, b, offsets[b],
        offsets[b] + requests[b].bytes, requests[a].begin, requests[a].end, requests[b].begin,
        requests[b].end);
  }
  return std::nullopt;
}

namespace {

class AutoAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "auto"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    // The slots rule costs a tenth of best fit and often reaches the bound on FSDP plans.
    const auto start = std::chrono::steady_clock::now();
    PoolAssignment slots = make_slots_assigner()->assign(requests, options);
    if (slots.proven_optimal && slots.status == PackStatus::solved) return slots;
    PoolAssignment greedy = make_best_fit_assigner(/*refine=*/true)->assign(requests, options);
    if (greedy.status == PackStatus::infeasible) return greedy;
    if (greedy.proven_optimal && greedy.status == PackStatus::solved) return greedy;
    // The exact search gets what is left of the time limit.
    PackOptions rest = options;
    rest.time_limit_seconds = std::max(
        0.05, options.time_limit_seconds -
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    PoolAssignment exact = make_exact_assigner()->assign(requests, rest);
    return exact.status == PackStatus::solved && exact.size_bytes <= greedy.size_bytes ? exact
                                                                                       : greedy;
  }
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_auto_assigner() {
  return std::make_unique<AutoAssigner>();
}

std::unique_ptr<OffsetAssigner> make_offset_assigner(std::string_view name) {
  if (name == "slots") return make_slots_assigner();
  if (name == "best-fit") return make_best_fit_assigner();
  if (name == "exact") return make_exact_assigner();
  if (name == "auto") return make_auto_assigner();
  return nullptr;
}

std::vector<std::string> offset_assigner_names() {
  return {"slots", "best-fit", "exact", "auto"};
}

}  // namespace shardplan
