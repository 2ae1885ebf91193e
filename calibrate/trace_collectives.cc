#include <fmt/format.h>

#include <algorithm>

#include "calibrate/calibrate.h"
#include "models/error.h"
#include "traces/trace_import.h"

namespace shardplan {

TraceMeasurements read_trace_measurements(const std::string& path, int64_t gpus_per_node) {
  const auto importer = make_trace_importer("auto", path);
  const ImportedTrace last = importer->import(path, {});
  TraceMeasurements out;
  out.num_gpus = last.timeline.num_gpus;
  for (const std::string& step : last.steps) {
    const ImportedTrace imported =
        step == last.step ? last : importer->import(path, {.step = step});
    out.steps.push_back(
        {.where = fmt::format("{} {}", path, step), .kernels = imported.kernel_seconds});
    for (const ImportedCollective& c : imported.collectives) {
      const std::optional<Collective> op = parse_collective(c.kind);
      // Sizes and groups the trace does not give are not guessed: such kernels are left out.
      if (!op || c.bytes <= 0 || c.group_size < 2 || c.duration_seconds <= 0) continue;
      out.collectives.push_back(
          {.op = *op,
           .layout = {.ranks = c.group_size,
                      .ranks_per_node = std::min(c.group_size, gpus_per_node)},
           .bytes = c.bytes,
           .seconds = c.duration_seconds,
           .where = fmt::format("{} {} {} at {:.6f} s", path, step, c.kind, c.start_seconds)});
    }
  }
  return out;
}

}  // namespace shardplan
