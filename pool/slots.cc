#include <algorithm>
#include <map>
#include <numeric>

#include "pool/placement.h"
#include "pool/pool.h"

namespace shardplan {
namespace pool {

std::optional<PoolAssignment> place_slots(const std::vector<PoolRequest>& requests,
                                          const PackOptions& options, Clock::time_point deadline) {
  struct Slot {
    int64_t bytes = 0;
    int64_t alignment = 1;
    std::map<int64_t, int64_t> members;  // begin -> end; members never overlap in time
  };
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties in request order keep the result deterministic.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  std::vector<Slot> slots;
  std::vector<std::size_t> slot_of(requests.size());
  std::size_t done = 0;
  for (std::size_t i : order) {
    // Each buffer visits every slot: thousands of slots on large inputs.
    if (++done % 64 == 0 && Clock::now() > deadline) return std::nullopt;
    const PoolRequest& r = requests[i];
    std::size_t best = slots.size();
    for (std::size_t s = 0; s < slots.size(); ++s) {
      const auto& members = slots[s].members;
      auto next = members.lower_bound(r.begin);
      if (next != members.end() && next->first < r.end) continue;
      if (next != members.begin() && std::prev(next)->second > r.begin) continue;
      const int64_t growth = std::max<int64_t>(0, r.bytes - slots[s].bytes);
      const int64_t best_growth =
          best == slots.size() ? 0 : std::max<int64_t>(0, r.bytes - slots[best].bytes);
      if (best == slots.size() || growth < best_growth ||
          (growth == best_growth && slots[s].bytes < slots[best].bytes)) {
        best = s;
      }
    }
    if (best == slots.size()) slots.emplace_back();
    Slot& slot = slots[best];
    slot.bytes = std::max(slot.bytes, r.bytes);
    slot.alignment = std::max(slot.alignment, r.alignment > 0 ? r.alignment : options.alignment);
    if (r.begin < r.end) slot.members.emplace(r.begin, r.end);
    slot_of[i] = best;
  }
  std::vector<int64_t> slot_offset(slots.size());
  int64_t top = 0;
  for (std::size_t s = 0; s < slots.size(); ++s) {
    slot_offset[s] = round_up(top, slots[s].alignment);
    top = slot_offset[s] + slots[s].bytes;
  }
  PoolAssignment out;
  out.offsets.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    out.offsets[i] = slot_offset[slot_of[i]];
    out.size_bytes = std::max(out.size_bytes, out.offsets[i] + requests[i].bytes);
  }
  return with_status(requests, std::move(out), live_bytes_lower_bound(requests, options.alignment),
                     options);
}

}  // namespace pool

namespace {

class SlotsAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "slots"; }

  // Past the time limit (the rule costs buffers x slots) the result is the time-order
  // placement, as promised by the limit.
  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    if (auto slots =
            pool::place_slots(requests, options, pool::deadline_of(options, pool::Clock::now()))) {
      return *slots;
    }
    return pool::with_status(requests, pool::place_online(requests, options.alignment),
                             live_bytes_lower_bound(requests, options.alignment), options);
  }
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_slots_assigner() {
  return std::make_unique<SlotsAssigner>();
}

}  // namespace shardplan
