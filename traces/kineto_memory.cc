// The measured memory curve: the caching allocator's totals at each CUDA [memory] event,
// placed on the GPU clock (kineto_gpu.cc).
#include <fmt/format.h>

#include <algorithm>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

struct MemoryEvents {
  std::vector<const KinetoEvent*> samples;  // by time: files need not be in time order
  int64_t cpu_only = 0;
  int64_t without_totals = 0;
};

MemoryEvents memory_events(const std::vector<KinetoEvent>& events, const KinetoStep& step) {
  MemoryEvents found;
  for (const KinetoEvent& e : events) {
    if (e.name != "[memory]" || !step.contains(e.ts)) continue;
    if (e.device_type != 1) {
      ++found.cpu_only;
      continue;
    }
    if (e.total_allocated < 0 || e.total_reserved < 0) {
      ++found.without_totals;
      continue;
    }
    found.samples.push_back(&e);
  }
  std::stable_sort(found.samples.begin(), found.samples.end(),
                   [](const KinetoEvent* a, const KinetoEvent* b) { return a->ts < b->ts; });
  return found;
}

}  // namespace

MemoryCurve import_memory(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                          const GpuClock& clock) {
  const MemoryEvents found = memory_events(events, step);
  MemoryCurve curve;
  for (const KinetoEvent* sample : found.samples) {
    const KinetoEvent& e = *sample;
    curve.samples.push_back({clock.seconds_at(e.ts), e.total_allocated, e.total_reserved});
    curve.peak_allocated_bytes = std::max(curve.peak_allocated_bytes, e.total_allocated);
    curve.peak_reserved_bytes = std::max(curve.peak_reserved_bytes, e.total_reserved);
  }
  if (found.without_totals > 0) {
    curve.warnings.push_back(
        fmt::format("{} CUDA [memory] events carry no 'Total Allocated'/'Total Reserved' "
                    "(older PyTorch): left out of the memory curve",
                    found.without_totals));
  }
  if (curve.samples.empty() && found.without_totals == 0) {
    curve.warnings.push_back(
        found.cpu_only > 0
            ? fmt::format("{} [memory] events, all for CPU memory: no GPU memory curve",
                          found.cpu_only)
            : std::string("no [memory] events (profile with profile_memory=True): no "
                          "measured memory curve"));
  }
  return curve;
}

}  // namespace shardplan::kineto
