#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "calibrate/calibrate.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/json_reader.h"
#include "models/text_format.h"

namespace shardplan {
namespace {

std::string value_text(double v, const std::string& unit) {
  if (unit == "us" || unit == "GB/s") return fmt::format("{:.2f} {}", v, unit);
  return fmt::format("{:.4g}", v);
}

std::string percent(double v) {
  return fmt::format("{:+.1f} %", 100 * v);
}

nlohmann::json optional_number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

int run_calibrate(const CalibrateParams& p, std::ostream& out) {
  const CalibrationResult result = calibrate_cluster(p.cluster, {.nccl_tests = p.nccl_tests,
                                                                 .nccl_algorithm = p.nccl_algorithm,
                                                                 .probes = p.probes,
                                                                 .traces = p.traces,
                                                                 .plan = p.plan,
                                                                 .measured = p.measured});
  if (!p.output.empty()) write_file_atomically(p.output, json_text(result.cluster_json, 2) + "\n");
  const CalibrationReport& r = result.report;
  if (p.json) {
    nlohmann::json constants = nlohmann::json::array();
    for (const FittedConstant& c : r.constants) {
      constants.push_back({{"name", c.name},
                           {"unit", c.unit},
                           {"before", c.before},
                           {"after", c.after},
                           {"points", c.points},
                           {"r2", optional_number(c.r2)},
                           {"rms_relative_error", c.rms_relative_error},
                           {"fitted", c.fitted},
                           {"note", c.note}});
    }
    nlohmann::json checks = nlohmann::json::array();
    for (const FitCheck& c : r.checks) {
      checks.push_back({{"what", c.what},
                        {"points", c.points},
                        {"rms_relative_error_before", c.rms_before},
                        {"rms_relative_error_after", c.rms_after},
                        {"worst_relative_error_before", c.worst_before},
                        {"worst_relative_error_after", c.worst_after}});
    }
    out << json_text(nlohmann::json{{"cluster", result.cluster.name},
                                    {"output", p.output.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(p.output)},
                                    {"constants", constants},
                                    {"checks", checks}},
                     2)
        << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> table;
  for (const FittedConstant& c : r.constants) {
    table.push_back({c.name, value_text(c.before, c.unit), value_text(c.after, c.unit),
                     std::to_string(c.points),
                     std::isfinite(c.r2) ? fmt::format("{:.4f}", c.r2) : "-",
                     fmt::format("{:.1f} %", 100 * c.rms_relative_error), c.note});
  }
  out << fmt::format("{}: constants fitted by least squares\n", result.cluster.name);
  out << render_table({"constant", "before", "after", "points", "R2", "rms error", "note"}, table,
                      {1, 2, 3, 4, 5});
  std::vector<std::vector<std::string>> checks;
  for (const FitCheck& c : r.checks) {
    checks.push_back({c.what, std::to_string(c.points), fmt::format("{:.1f} %", 100 * c.rms_before),
                      fmt::format("{:.1f} %", 100 * c.rms_after), percent(c.worst_before),
                      percent(c.worst_after)});
  }
  out << "\nmodel against the measurements (relative error):\n";
  out << render_table(
      {"measurements", "points", "rms before", "rms after", "worst before", "worst after"}, checks,
      {1, 2, 3, 4, 5});
  out << (p.output.empty()
              ? "\nnot written (no -o)\n"
              : fmt::format("\nwrote {}: give it as --cluster to any command\n", p.output));
  return 0;
}

Command add_calibrate_command(CLI::App& app) {
  auto params = std::make_shared<CalibrateParams>();
  CalibrateParams& p = *params;
  p.cluster = kDefaultCluster;
  auto* calibrate = app.add_subcommand(
      "calibrate", "fit a cluster's constants to nccl-tests logs, probes and measured timelines");
  calibrate->add_option("--cluster", p.cluster, "zoo cluster name or cluster JSON file to fit")
      ->capture_default_str();
  calibrate->add_option("--nccl-tests", p.nccl_tests,
                        "nccl-tests output (all_reduce_perf, all_gather_perf, "
                        "reduce_scatter_perf, alltoall_perf, sendrecv_perf), as printed");
  calibrate->add_option(
      "--nccl-algo", p.nccl_algorithm,
      "ring | tree | nvls: the NCCL_ALGO the logs ran with (default: NCCL chose)");
  calibrate->add_option("--probe", p.probes, "probe.json from shardplan probe");
  calibrate->add_option("--trace", p.traces,
                        "a PyTorch profiler trace: its NCCL kernels' sizes and times, every step; "
                        "with --plan (the job it recorded), its compute kernels' time by class");
  calibrate->add_option("--plan", p.plan, "plan.json the --measured timelines ran");
  calibrate->add_option("--measured", p.measured, "timeline.json from shardplan execute");
  calibrate->add_option("-o,--output", p.output, "write the calibrated cluster file");
  calibrate->add_flag("--json", p.json, "machine-readable report");
  return {calibrate, [params] { return run_calibrate(*params, std::cout); }};
}

}  // namespace shardplan
