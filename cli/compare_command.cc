#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/text_format.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "traces/timeline.h"

namespace shardplan {
namespace {

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}

std::string error_percent(double predicted, double measured) {
  if (measured <= 0) return "-";
  return fmt::format("{:+.1f} %", 100.0 * (predicted / measured - 1.0));
}

}  // namespace

int run_compare(const CompareParams& p, std::ostream& out) {
  const Timeline predicted = timeline_from_json(read_json_file(p.predicted), p.predicted);
  const Timeline measured = timeline_from_json(read_json_file(p.measured), p.measured);
  if (predicted.ops.size() != measured.ops.size()) {
    throw InputError(p.measured, "ops",
                     fmt::format("{} ops, but {} has {}: not the same plan", measured.ops.size(),
                                 p.predicted, predicted.ops.size()));
  }
  // Total op time per kind (busy time, summed over ops).
  std::map<std::string, std::pair<double, double>> by_kind;
  for (std::size_t i = 0; i < predicted.ops.size(); ++i) {
    const TimelineOp& a = predicted.ops[i];
    const TimelineOp& b = measured.ops[i];
    if (a.name != b.name) {
      throw InputError(
          p.measured, fmt::format("ops/{}/name", i),
          fmt::format("'{}' where {} has '{}': not the same plan", b.name, p.predicted, a.name));
    }
    by_kind[a.kind].first += a.end - a.start;
    by_kind[a.kind].second += b.end - b.start;
  }
  const double step_p = predicted.summary.step_seconds, step_m = measured.summary.step_seconds;
  if (p.json) {
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [kind, t] : by_kind)
      kinds[kind] = {{"predicted_seconds", t.first}, {"measured_seconds", t.second}};
    out << nlohmann::json{{"predicted", p.predicted},
                          {"measured", p.measured},
                          {"step", {{"predicted_seconds", step_p}, {"measured_seconds", step_m}}},
                          {"by_kind", kinds}}
               .dump(2)
        << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [kind, t] : by_kind)
    rows.push_back({kind, ms(t.first), ms(t.second), error_percent(t.first, t.second)});
  rows.push_back({"step", ms(step_p), ms(step_m), error_percent(step_p, step_m)});
  out << fmt::format("{} ({}) against {} ({}), op time summed per kind:\n", p.predicted,
                     predicted.source, p.measured, measured.source);
  out << render_table({"", "predicted (ms)", "measured (ms)", "error"}, rows, {1, 2, 3});
  return 0;
}

}  // namespace shardplan
