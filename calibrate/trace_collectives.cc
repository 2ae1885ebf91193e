#include <fmt/format.h>

#include <algorithm>

#include "calibrate/calibrate.h"
#include "models/error.h"
#include "traces/trace_import.h"

namespace shardplan {

std::vector<CollectiveSample> trace_collectives(const std::string& path, int64_t gpus_per_node) {
  const auto importer = make_trace_importer("auto", path);
  const ImportedTrace last = importer->import(path, {});
  std::vector<CollectiveSample> samples;
  for (const std::string& step : last.steps) {
    const ImportedTrace imported =
        step == last.step ? last : importer->import(path, {.step = step});
    for (const ImportedCollective& c : imported.collectives) {
      const std::optional<Collective> op = parse_collective(c.kind);
      // Sizes and groups the trace does not give are not guessed: such kernels are left out.
      if (!op || c.bytes <= 0 || c.group_size < 2 || c.duration_seconds <= 0) continue;
      samples.push_back(
          {.op = *op,
           .layout = {.ranks = c.group_size,
                      .ranks_per_node = std::min(c.group_size, gpus_per_node)},
           .bytes = c.bytes,
           .seconds = c.duration_seconds,
           .where = fmt::format("{} {} {} at {:.6f} s", path, step, c.kind, c.start_seconds)});
    }
  }
  if (samples.empty()) {
    throw InputError(path, "collectives",
                     "no NCCL kernel with a known collective, size and group size to fit");
  }
  return samples;
}

}  // namespace shardplan
