#include <algorithm>
#include <tuple>

#include "pool/pool.h"

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

}  // namespace shardplan
