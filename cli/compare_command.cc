#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
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

// Two timelines of one plan have the same ops in the same order.
void check_same_plan(const Timeline& predicted, const Timeline& measured, const CompareParams& p) {
  if (predicted.ops.size() != measured.ops.size()) {
    throw InputError(p.measured, "ops",
                     fmt::format("{} ops, but {} has {}: not the same plan", measured.ops.size(),
                                 p.predicted, predicted.ops.size()));
  }
  for (std::size_t i = 0; i < predicted.ops.size(); ++i) {
    if (predicted.ops[i].name != measured.ops[i].name) {
      throw InputError(
          p.measured, fmt::format("ops/{}/name", i),
          fmt::format("{} where {} has {}: not the same plan", quote_input(measured.ops[i].name),
                      p.predicted, quote_input(predicted.ops[i].name)));
    }
  }
}

// Total op time per kind (busy time, summed over ops).
std::map<std::string, std::pair<double, double>> time_by_kind(const Timeline& predicted,
                                                              const Timeline& measured) {
  std::map<std::string, std::pair<double, double>> by_kind;
  for (const TimelineOp& op : predicted.ops) by_kind[op.kind].first += op.end - op.start;
  for (const TimelineOp& op : measured.ops) by_kind[op.kind].second += op.end - op.start;
  return by_kind;
}

}  // namespace

int run_compare(const CompareParams& p, std::ostream& out) {
  const Timeline predicted =
      timeline_from_json(read_json_file(p.predicted, limits::kMaxPlanFileBytes), p.predicted);
  const Timeline measured =
      timeline_from_json(read_json_file(p.measured, limits::kMaxPlanFileBytes), p.measured);
  // A profiler trace's ops are GPU kernels, not plan ops: only kinds and the step compare.
  const bool by_kind_only = predicted.source == "profiled" || measured.source == "profiled";
  if (!by_kind_only) check_same_plan(predicted, measured, p);
  const auto by_kind = time_by_kind(predicted, measured);
  const TimelineSummary& a = predicted.summary;
  const TimelineSummary& b = measured.summary;
  const std::vector<std::tuple<std::string, double, double>> streams = {
      {"compute busy", a.compute_seconds, b.compute_seconds},
      {"exposed all-gather", a.exposed_all_gather_seconds, b.exposed_all_gather_seconds},
      {"exposed reduce-scatter", a.exposed_reduce_scatter_seconds,
       b.exposed_reduce_scatter_seconds},
      {"step", a.step_seconds, b.step_seconds}};
  if (p.json) {
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [kind, t] : by_kind)
      kinds[kind] = {{"predicted_seconds", t.first}, {"measured_seconds", t.second}};
    nlohmann::json summary = nlohmann::json::object();
    for (const auto& [name, x, y] : streams)
      summary[name] = {{"predicted_seconds", x}, {"measured_seconds", y}};
    out << json_text(nlohmann::json{{"predicted", p.predicted},
                                    {"measured", p.measured},
                                    {"matched_ops", !by_kind_only},
                                    {"step",
                                     {{"predicted_seconds", a.step_seconds},
                                      {"measured_seconds", b.step_seconds}}},
                                    {"by_kind", kinds},
                                    {"summary", summary}},
                     2)
        << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [kind, t] : by_kind)
    rows.push_back({kind, ms(t.first), ms(t.second), error_percent(t.first, t.second)});
  for (const auto& [name, x, y] : streams)
    rows.push_back({name, ms(x), ms(y), error_percent(x, y)});
  out << fmt::format("{} ({}) against {} ({}), op time summed per kind:\n", p.predicted,
                     predicted.source, p.measured, measured.source);
  if (by_kind_only) {
    out << "(a profiler trace's ops are GPU kernels, not the plan's ops: compared by kind and "
           "stream, not op by op)\n";
  }
  out << render_table({"", "predicted (ms)", "measured (ms)", "error"}, rows, {1, 2, 3});
  return 0;
}

Command add_compare_command(CLI::App& app) {
  auto params = std::make_shared<CompareParams>();
  CompareParams& p = *params;
  auto* compare = app.add_subcommand(
      "compare", "predicted against measured timeline: op time per kind and the step");
  compare->add_option("predicted", p.predicted, "timeline.json from simulate")
      ->required()
      ->check(CLI::ExistingFile);
  compare
      ->add_option("measured", p.measured,
                   "timeline.json from execute, or from trace import --timeline")
      ->required()
      ->check(CLI::ExistingFile);
  compare->add_flag("--json", p.json, "machine-readable output");

  return {compare, [params] { return run_compare(*params, std::cout); }};
}

}  // namespace shardplan
