#include <algorithm>
#include <numeric>

#include "pool/exact.h"
#include "pool/placement.h"

namespace shardplan::pool {

int64_t instance_entries(const std::vector<PoolRequest>& requests) {
  const std::vector<int64_t> times = pool::distinct_times(requests);
  auto index = [&](int64_t t) {
    return std::lower_bound(times.begin(), times.end(), t) - times.begin();
  };
  int64_t entries = 0;
  // (time, +1 start / -1 end): ends first at equal times, as lifetimes are half-open.
  std::vector<std::pair<int64_t, int>> events;
  events.reserve(2 * requests.size());
  for (const PoolRequest& r : requests) {
    if (r.begin >= r.end) continue;
    entries += index(r.end) - index(r.begin);
    events.emplace_back(r.begin, 1);
    events.emplace_back(r.end, -1);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [time, delta] : events) {
    if (delta > 0) entries += 2 * live;  // both directions of each new pair
    live += delta;
  }
  return entries;
}

Instance prepare(const std::vector<PoolRequest>& requests, int64_t default_alignment) {
  Instance in;
  const auto n = requests.size();
  std::vector<int64_t> times;
  for (const PoolRequest& r : requests) {
    times.push_back(r.begin);
    times.push_back(r.end);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  const auto sections = times.empty() ? 0 : times.size() - 1;
  in.in_section.resize(sections);
  in.size.resize(n);
  in.length.resize(n);
  in.alignment.resize(n);
  in.section_lo.resize(n);
  in.section_hi.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const PoolRequest& r = requests[i];
    in.size[i] = r.bytes;
    in.length[i] = r.end - r.begin;
    in.alignment[i] = r.alignment > 0 ? r.alignment : std::max<int64_t>(default_alignment, 1);
    in.section_lo[i] = std::lower_bound(times.begin(), times.end(), r.begin) - times.begin();
    in.section_hi[i] = std::lower_bound(times.begin(), times.end(), r.end) - times.begin();
    for (int64_t s = in.section_lo[i]; s < in.section_hi[i]; ++s) {
      in.in_section[static_cast<std::size_t>(s)].push_back(static_cast<int32_t>(i));
    }
  }
  // Overlaps by sweeping sections: two buffers overlap iff they share a section.
  in.overlaps.resize(n);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return in.section_lo[a] < in.section_lo[b]; });
  std::vector<std::size_t> active;
  for (std::size_t i : order) {
    if (in.section_lo[i] >= in.section_hi[i]) continue;
    std::erase_if(active, [&](std::size_t j) { return in.section_hi[j] <= in.section_lo[i]; });
    for (std::size_t j : active) {
      in.overlaps[i].push_back(static_cast<int32_t>(j));
      in.overlaps[j].push_back(static_cast<int32_t>(i));
    }
    active.push_back(i);
  }
  // Independent partitions: cut wherever no buffer spans a section boundary.
  std::vector<int32_t> crossing(sections + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int64_t s = in.section_lo[i] + 1; s < in.section_hi[i]; ++s)
      crossing[static_cast<std::size_t>(s)] = 1;
  }
  std::vector<int32_t> partition_of_section(sections, 0);
  int32_t current = 0;
  for (std::size_t s = 0; s < sections; ++s) {
    if (s > 0 && !crossing[s]) ++current;
    partition_of_section[s] = current;
  }
  in.partitions.assign(static_cast<std::size_t>(sections == 0 ? 0 : current + 1), {});
  in.partition_sections.assign(in.partitions.size(), {INT32_MAX, 0});
  for (std::size_t s = 0; s < sections; ++s) {
    auto& range = in.partition_sections[static_cast<std::size_t>(partition_of_section[s])];
    range.first = std::min(range.first, static_cast<int32_t>(s));
    range.second = std::max(range.second, static_cast<int32_t>(s + 1));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (in.section_lo[i] < in.section_hi[i]) {
      in.partitions[static_cast<std::size_t>(
                        partition_of_section[static_cast<std::size_t>(in.section_lo[i])])]
          .push_back(static_cast<int32_t>(i));
    }
  }
  return in;
}

std::vector<int32_t> preorder(const Instance& in, const std::vector<int32_t>& buffers,
                              const std::vector<int64_t>& section_total,
                              const Heuristic& heuristic) {
  struct Keys {
    int64_t width, area, total;
    int32_t buffer;
  };
  std::vector<Keys> keys;
  keys.reserve(buffers.size());
  for (int32_t b : buffers) {
    const auto i = static_cast<std::size_t>(b);
    int64_t total = 0;
    for (int64_t s = in.section_lo[i]; s < in.section_hi[i]; ++s) {
      total = std::max(total, section_total[static_cast<std::size_t>(s)]);
    }
    // Saturates: only the order matters, and sizes × lifetimes may pass int64.
    int64_t area = 0;
    if (__builtin_mul_overflow(in.size[i], in.length[i], &area)) area = INT64_MAX;
    keys.push_back({in.length[i], area, total, b});
  }
  std::sort(keys.begin(), keys.end(), [&](const Keys& a, const Keys& b) {
    for (Key k : heuristic) {
      const int64_t x = k == Key::width ? a.width : k == Key::area ? a.area : a.total;
      const int64_t y = k == Key::width ? b.width : k == Key::area ? b.area : b.total;
      if (x != y) return x > y;
    }
    return a.buffer < b.buffer;
  });
  std::vector<int32_t> order;
  order.reserve(keys.size());
  for (const Keys& k : keys) order.push_back(k.buffer);
  return order;
}

}  // namespace shardplan::pool
