#include <fmt/format.h>

#include <cmath>

#include "calibrate/calibrate.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "planner/plan_json.h"

namespace shardplan {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& s : items) text += (text.empty() ? "" : ", ") + s;
  return text;
}

nlohmann::json calibration_json(const std::vector<CollectiveCalibration>& entries) {
  nlohmann::json out = nlohmann::json::array();
  for (const CollectiveCalibration& k : entries) {
    nlohmann::json e = {{"tier", network_tier_name(k.tier)},
                        {"algorithm", nccl_algorithm_name(k.algorithm)},
                        {"protocol", nccl_protocol_name(k.protocol)},
                        {"latency_scale", k.latency_scale},
                        {"bandwidth_scale", k.bandwidth_scale},
                        {"points", k.points},
                        {"rms_relative_error", k.rms_relative_error}};
    if (std::isfinite(k.r2)) e["r2"] = k.r2;
    out.push_back(e);
  }
  return out;
}

}  // namespace

CalibrationResult calibrate_cluster(const std::string& cluster_name_or_file,
                                    const CalibrationInputs& inputs) {
  const auto [original, label] = cluster_json(cluster_name_or_file);
  CalibrationResult result;
  result.cluster = cluster_from_json(original, label);
  if (inputs.nccl_tests.empty() && inputs.probes.empty() && inputs.traces.empty() &&
      inputs.measured.empty()) {
    throw InputError("", "calibrate",
                     "nothing to fit: give --nccl-tests logs, --probe files, --trace profiles or "
                     "--measured timelines");
  }
  if (!inputs.measured.empty() && inputs.plan.empty()) {
    throw InputError("", "--plan", "--measured timelines need the plan.json they ran");
  }
  if (!inputs.plan.empty() && inputs.measured.empty() && inputs.traces.empty()) {
    throw InputError("", "--plan",
                     "says which job --measured timelines or --trace profiles ran: give them");
  }
  std::vector<CollectiveSample> samples;
  std::vector<std::string> collective_sources;
  std::optional<NcclAlgorithm> algorithm;
  if (!inputs.nccl_algorithm.empty() && inputs.nccl_tests.empty()) {
    throw InputError("", "--nccl-algo", "says how --nccl-tests logs ran: give the logs");
  }
  if (!inputs.nccl_algorithm.empty()) {
    for (NcclAlgorithm a : {NcclAlgorithm::ring, NcclAlgorithm::tree, NcclAlgorithm::nvls}) {
      if (nccl_algorithm_name(a) == inputs.nccl_algorithm) algorithm = a;
    }
    if (!algorithm) {
      throw InputError("", "--nccl-algo",
                       fmt::format("{}: give ring, tree or nvls (the NCCL_ALGO the logs ran "
                                   "with)",
                                   quote_input(inputs.nccl_algorithm)));
    }
  }
  for (const std::string& path : inputs.nccl_tests) {
    NcclTestsLog log = read_nccl_tests_log(path);
    for (CollectiveSample& s : log.samples) s.algorithm = algorithm;
    samples.insert(samples.end(), log.samples.begin(), log.samples.end());
    collective_sources.push_back(fmt::format("{} ({}, {} ranks on {} node{})", path,
                                             collective_name(log.op), log.ranks, log.nodes,
                                             log.nodes == 1 ? "" : "s"));
  }
  std::vector<TracedStep> traced_steps;
  std::optional<Plan> plan;
  if (!inputs.plan.empty()) plan = read_plan_file(inputs.plan);
  for (const std::string& path : inputs.traces) {
    TraceMeasurements traced = read_trace_measurements(path, result.cluster.gpus_per_node);
    if (traced.collectives.empty() && !plan) {
      throw InputError(path, "collectives",
                       "no NCCL kernel with a known collective, size and group size to fit "
                       "(with --plan, its compute kernels are fitted too)");
    }
    if (plan && traced.num_gpus > 0 && traced.num_gpus != plan->num_gpus) {
      throw InputError(path, "distributedInfo",
                       fmt::format("the trace ran on {} GPUs, {} is a plan for {}: calibrate "
                                   "compute against the plan of the job the trace recorded",
                                   traced.num_gpus, inputs.plan, plan->num_gpus));
    }
    samples.insert(samples.end(), traced.collectives.begin(), traced.collectives.end());
    if (!traced.collectives.empty()) {
      collective_sources.push_back(
          fmt::format("{} ({} NCCL kernels)", path, traced.collectives.size()));
    }
    traced_steps.insert(traced_steps.end(), traced.steps.begin(), traced.steps.end());
  }
  std::vector<std::pair<std::string, std::vector<ProbeKernel>>> kernels;
  std::vector<std::pair<std::string, std::vector<ProbeKernel>>> gpu_probes;  // cuda backend
  for (const std::string& path : inputs.probes) {
    const ProbeFile probe = read_probe_file(path);
    samples.insert(samples.end(), probe.collectives.begin(), probe.collectives.end());
    if (!probe.collectives.empty()) collective_sources.push_back(path);
    if (!probe.kernels.empty()) kernels.emplace_back(path, probe.kernels);
    if (probe.backend == "cuda") gpu_probes.emplace_back(path, probe.kernels);
  }
  nlohmann::json out = original;
  bool compute_fitted = false;
  // A job's own measured compute (a profiled step, a measured timeline) wins over the file's
  // GEMM tables: those fits price every GEMM at one efficiency per precision (the mix of
  // the shapes that job ran), so the tables leave the calibrated file rather than override
  // what was fitted.
  const bool fits_job = (plan && !traced_steps.empty()) || !inputs.measured.empty();
  if (fits_job && !result.cluster.compute.gemm_tables.empty()) {
    result.cluster.compute.gemm_tables.clear();
    out["compute"].erase("gemm_tables");
    out["sources"].erase("compute.gemm_tables");
    result.report.constants.push_back(
        {.name = "compute.gemm_tables",
         .unit = "tables",
         .before = static_cast<double>(original.at("compute").at("gemm_tables").size()),
         .after = 0,
         .r2 = NAN,
         .fitted = false,
         .note = "left out of the calibrated file: the fitted efficiencies price its GEMMs"});
  }
  auto cite = [&](std::size_t first, const std::string& what) {
    for (std::size_t i = first; i < result.report.constants.size(); ++i) {
      const FittedConstant& c = result.report.constants[i];
      if (!c.fitted) continue;  // kept: its own source still holds
      out["sources"][c.name] = fmt::format(
          "shardplan calibrate: fitted by least squares to {} ({} points, {:.4g} before){}", what,
          c.points, c.before, c.note.empty() ? "" : "; " + c.note);
    }
  };
  for (const auto& [path, measured] : kernels) {
    const std::size_t first = result.report.constants.size();
    fit_probe_kernels(result.cluster, measured, path, result.report);
    cite(first, fmt::format("the GEMMs and copies {} timed", path));
    compute_fitted = true;
  }
  // A GPU probe's GEMMs are this GPU's measured table (models/gemm_rate.h): it replaces
  // the file's BF16 table; the last probe given wins.
  for (const auto& [path, measured] : gpu_probes) {
    nlohmann::json points = nlohmann::json::array();
    for (const ProbeKernel& k : measured) {
      if (!k.gemm || !(k.seconds > 0)) continue;
      points.push_back({{"m", k.m},
                        {"n", k.n},
                        {"k", k.k},
                        {"tflops", 2.0 * static_cast<double>(k.m) * static_cast<double>(k.n) *
                                       static_cast<double>(k.k) / k.seconds / 1e12}});
    }
    if (points.size() < 3 || fits_job) continue;
    nlohmann::json tables = nlohmann::json::array();
    if (out.contains("compute") && out["compute"].contains("gemm_tables")) {
      for (const nlohmann::json& t : out["compute"]["gemm_tables"]) {
        if (t.value("precision", "") != "bf16" || t.value("grouped", false)) tables.push_back(t);
      }
    }
    tables.push_back({{"precision", "bf16"},
                      {"source", fmt::format("shardplan calibrate: the GEMMs {} timed", path)},
                      {"points", points}});
    out["compute"]["gemm_tables"] = tables;
    out["sources"]["compute.gemm_tables"] = fmt::format(
        "shardplan calibrate: the BF16 GEMMs {} timed ({} shapes)", path, points.size());
  }
  if (!samples.empty()) {
    fit_collectives(result.cluster, samples, result.report);
    out["collective_calibration"] = calibration_json(result.cluster.collective_calibration);
    out["sources"]["collective_calibration"] = fmt::format(
        "shardplan calibrate: latency and bandwidth scales per regime fitted by least "
        "squares to {} measured collectives from {}",
        samples.size(), joined(collective_sources));
  }
  if (plan && !traced_steps.empty()) {
    const std::size_t first = result.report.constants.size();
    const std::string traces = joined(inputs.traces);
    fit_trace_compute(result.cluster, *plan, traced_steps, traces, result.report);
    cite(first, fmt::format("the compute kernels by class of {} profiled steps of {} against "
                            "the work of {}",
                            traced_steps.size(), traces, inputs.plan));
    compute_fitted = true;
  }
  if (!inputs.measured.empty()) {
    for (const std::string& path : inputs.measured) {
      const Timeline t = timeline_from_json(read_json_file(path, limits::kMaxPlanFileBytes), path);
      const std::size_t first = result.report.constants.size();
      fit_compute(result.cluster, *plan, t, path, result.report);
      cite(first, fmt::format("the compute ops {} measured for {}", path, inputs.plan));
    }
    compute_fitted = true;
  }
  // Each compute fit starts from the one before: say which constants a later input
  // replaced (the file keeps the last).
  for (std::size_t i = 0; i < result.report.constants.size(); ++i) {
    FittedConstant& c = result.report.constants[i];
    for (std::size_t j = i + 1; j < result.report.constants.size(); ++j) {
      if (result.report.constants[j].name != c.name) continue;
      c.note += (c.note.empty() ? "" : "; ") + std::string("replaced by a later input below");
      break;
    }
  }
  if (compute_fitted) {
    const ComputeSpec& e = result.cluster.compute;
    // Fitted constants replace the file's; its measured GEMM tables stay.
    nlohmann::json& compute = out["compute"];
    if (!compute.is_object()) compute = nlohmann::json::object();
    compute["gemm_efficiency"] = e.gemm_efficiency;
    compute["fp8_gemm_efficiency"] = e.fp8_gemm_efficiency;
    compute["attention_efficiency"] = e.attention_efficiency;
    compute["sdpa_attention_efficiency"] = e.sdpa_attention_efficiency;
    compute["elementwise_efficiency"] = e.elementwise_efficiency;
    compute["optimizer_efficiency"] = e.optimizer_efficiency;
    compute["overlap_slowdown"] = e.overlap_slowdown;
  }
  out["description"] =
      fmt::format("{} Calibrated by shardplan calibrate.", original.value("description", ""));
  // What is written must read back as what was fitted.
  result.cluster = cluster_from_json(out, label + " (calibrated)");
  result.cluster_json = std::move(out);
  return result;
}

}  // namespace shardplan
