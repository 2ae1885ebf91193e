#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <tuple>

#include "pool/placement.h"
#include "pool/pool.h"

namespace shardplan {

namespace {

// Up to this many buffers the exact search follows best fit; past it, with thousands of
// buffers live at once, a search node costs milliseconds and the search rarely gets past
// its first probe (0 nodes on bert_nezha's 12 062 buffers in 10 s), so local repair does.
constexpr std::size_t kExactBuffers = 2000;

// Independent time windows: the buffers split wherever no buffer is live across a time
// (between micro-batches, between steps). Buffers that take no space join the first.
std::vector<std::vector<std::size_t>> time_windows(const std::vector<PoolRequest>& requests) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (pool::occupies(requests[i])) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].begin != requests[b].begin ? requests[a].begin < requests[b].begin : a < b;
  });
  std::vector<std::vector<std::size_t>> windows;
  int64_t reach = INT64_MIN;
  for (std::size_t i : order) {
    if (windows.empty() || requests[i].begin >= reach) windows.emplace_back();
    windows.back().push_back(i);
    reach = std::max(reach, requests[i].end);
  }
  if (windows.empty()) windows.emplace_back();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!pool::occupies(requests[i])) windows.front().push_back(i);
  }
  return windows;
}

class AutoAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "auto"; }

  // Each independent time window is packed on its own (the pool is as high as the highest
  // one): a quick best fit of each, then the whole method on those above the lower
  // bound, each with a share of the time in proportion to its buffers.
  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    using pool::Clock;
    const auto start = Clock::now();
    const std::vector<std::vector<std::size_t>> windows = time_windows(requests);
    if (windows.size() == 1) return assign_window(requests, options);
    const bool by_clock = options.node_limit <= 0;
    const int64_t bound = live_bytes_lower_bound(requests, options.alignment);
    PoolAssignment out;
    out.offsets.assign(requests.size(), 0);
    std::vector<std::vector<PoolRequest>> parts(windows.size());
    std::vector<std::size_t> needy;
    std::vector<int64_t> height(windows.size(), 0);
    std::size_t needy_buffers = 0;
    PackOptions quick = options;
    quick.capacity.reset();
    quick.target_bytes = std::max(options.target_bytes, bound);
    const auto left = [&] {
      return std::max(0.0, options.time_limit_seconds -
                               std::chrono::duration<double>(Clock::now() - start).count());
    };
    for (std::size_t w = 0; w < windows.size(); ++w) {
      for (std::size_t i : windows[w]) parts[w].push_back(requests[i]);
      if (by_clock) quick.time_limit_seconds = left() / static_cast<double>(windows.size() - w);
      const PoolAssignment fit = make_best_fit_assigner()->assign(parts[w], quick);
      for (std::size_t k = 0; k < windows[w].size(); ++k)
        out.offsets[windows[w][k]] = fit.offsets[k];
      height[w] = fit.size_bytes;
      if (fit.size_bytes > bound) {
        needy.push_back(w);
        needy_buffers += windows[w].size();
      }
    }
    for (std::size_t w : needy) {
      PackOptions share = quick;
      if (by_clock) {
        share.time_limit_seconds =
            left() * static_cast<double>(windows[w].size()) / static_cast<double>(needy_buffers);
        needy_buffers -= windows[w].size();
      }
      const PoolAssignment better = assign_window(parts[w], share);
      if (better.size_bytes >= height[w]) continue;  // a short share may not beat best fit
      for (std::size_t k = 0; k < windows[w].size(); ++k)
        out.offsets[windows[w][k]] = better.offsets[k];
    }
    out.size_bytes = 0;
    for (std::size_t i = 0; i < requests.size(); ++i)
      out.size_bytes = std::max(out.size_bytes, out.offsets[i] + requests[i].bytes);
    return pool::with_status(requests, std::move(out), bound, options);
  }

 private:
  PoolAssignment assign_window(const std::vector<PoolRequest>& requests,
                               const PackOptions& options) const {
    using pool::Clock;
    const auto start = Clock::now();
    const bool by_clock = options.node_limit <= 0;
    const Clock::time_point deadline = pool::deadline_of(options, start);
    const auto left = [&] {
      return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
    };
    // The slots rule often reaches the bound on FSDP plans; it costs buffers × slots, up to
    // seconds on traces of tens of thousands of buffers (where best fit now takes less), so
    // it may take an eighth of the time.
    std::optional<PoolAssignment> slots =
        pool::place_slots(requests, options, by_clock ? start + (deadline - start) / 8 : deadline);
    const int64_t lower_bound = live_bytes_lower_bound(requests, options.alignment);
    const int64_t bound = std::max(options.target_bytes, lower_bound);  // good enough
    if (slots && slots->size_bytes <= bound)
      return pool::with_status(requests, std::move(*slots), lower_bound, options);
    PackOptions rest = options;
    rest.time_limit_seconds = by_clock ? left() : options.time_limit_seconds;
    PoolAssignment best = make_best_fit_assigner(/*refine=*/true)->assign(requests, rest);
    if (options.capacity && lower_bound > *options.capacity) return best;  // proven infeasible
    if (slots && slots->size_bytes < best.size_bytes) {
      best.offsets = std::move(slots->offsets);
      best.size_bytes = slots->size_bytes;
    }
    if (best.size_bytes <= bound)
      return pool::with_status(requests, std::move(best), lower_bound, options);
    if (requests.size() <= kExactBuffers) {
      rest.time_limit_seconds = by_clock ? std::max(0.05, left()) : options.time_limit_seconds;
      PoolAssignment exact = make_exact_assigner()->assign(requests, rest);
      if (exact.status == PackStatus::solved && exact.size_bytes <= best.size_bytes) return exact;
      return pool::with_status(requests, std::move(best), lower_bound, options);
    }
    // Two chains of local search from the same start, one per core: the window search
    // (exact re-packing of a time window around a buffer at the height) and ruin and
    // recreate (greedy re-packing of the highest buffers there); each finds what the other
    // misses. The lower wins, the first on ties. With a node limit one ruin-and-recreate
    // chain of that many rounds (a window-search round costs up to thousands of search
    // nodes: too slow for the planner's loops, which set the node limit).
    std::vector<std::future<PoolAssignment>> runs;
    if (by_clock) {
      runs.push_back(std::async(std::launch::deferred, [&] {
        return pool::window_search(requests, best, bound, options.alignment, deadline, 0, 1);
      }));
      runs.push_back(std::async(std::launch::async, [&] {
        return pool::repair(requests, best, bound, options.alignment, deadline, 0, 2);
      }));
    } else {
      runs.push_back(std::async(std::launch::deferred, [&] {
        return pool::repair(requests, best, bound, options.alignment, deadline, options.node_limit,
                            1);
      }));
    }
    PoolAssignment repaired = runs.front().get();
    for (std::size_t k = 1; k < runs.size(); ++k) {
      PoolAssignment other = runs[k].get();
      if (other.size_bytes < repaired.size_bytes) repaired = std::move(other);
    }
    return pool::with_status(requests, std::move(repaired), lower_bound, options);
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
