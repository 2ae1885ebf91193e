#include <fmt/format.h>

#include "calibrate/calibrate.h"
#include "calibrate/fit_stats.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/suggest.h"

namespace shardplan {

ProbeFile read_probe_file(const std::string& path) {
  const nlohmann::json json = read_json_file(path);  // JsonReader keeps a pointer to it
  const JsonReader r(json, path);
  r.expect_only(
      {"probe_version", "backend", "device", "ranks", "ranks_per_node", "collectives", "kernels"});
  const int64_t version = r.integer("probe_version");
  if (version != 1) {
    r.fail("probe_version", fmt::format("this shardplan reads version 1, got {}", version));
  }
  ProbeFile probe;
  probe.backend = r.string_or("backend", "cpu");
  if (probe.backend != "cpu" && probe.backend != "cuda") {
    r.fail("backend", fmt::format("{}: cpu or cuda", quote_input(probe.backend)));
  }
  std::vector<CollectiveSample>& samples = probe.collectives;
  const std::vector<JsonReader> groups = r.objects("collectives");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const JsonReader& c = groups[g];
    c.expect_only({"op", "group", "ranks", "ranks_per_node", "rows"});
    const std::string name = c.string("op");
    const std::optional<Collective> op = parse_collective(name);
    if (!op) c.fail("op", unknown_name_message("collective", name, collective_names()));
    const RankLayout layout{.ranks = c.integer_in("ranks", 2, limits::kMaxGpus),
                            .ranks_per_node = c.integer_in("ranks_per_node", 1, limits::kMaxGpus)};
    const std::vector<JsonReader> rows = c.objects("rows");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      rows[i].expect_only({"bytes", "seconds"});
      samples.push_back({.op = *op,
                         .layout = layout,
                         .bytes = rows[i].number_in("bytes", 1, kMaxCollectiveBytes),
                         .seconds = rows[i].number_in("seconds", 1e-9, kMaxMeasuredSeconds),
                         .where = fmt::format("{}: /collectives/{}/rows/{}", path, g, i)});
    }
  }
  if (r.has("kernels")) {
    const std::vector<JsonReader> kernels = r.objects("kernels");
    for (const JsonReader& k : kernels) {
      const std::string kind = k.string("kind");
      ProbeKernel kernel{.seconds = k.number_in("seconds", 1e-9, kMaxMeasuredSeconds)};
      if (kind == "gemm") {
        k.expect_only({"kind", "m", "n", "k", "seconds"});
        kernel.m = k.integer_in("m", 1, int64_t{1} << 24);
        kernel.n = k.integer_in("n", 1, int64_t{1} << 24);
        kernel.k = k.integer_in("k", 1, int64_t{1} << 24);
      } else if (kind == "copy") {
        k.expect_only({"kind", "bytes", "seconds"});
        kernel.gemm = false;
        kernel.bytes = k.number_in("bytes", 1, kMaxCollectiveBytes);
      } else {
        k.fail("kind", fmt::format("{}: gemm or copy", quote_input(kind)));
      }
      probe.kernels.push_back(kernel);
    }
  }
  if (samples.empty() && probe.kernels.empty()) {
    r.fail("collectives", "no measured collectives or kernels to fit");
  }
  return probe;
}

namespace {

// One scale u on relative errors: work_i × u ≈ seconds_i; returns u and the fit's quality.
struct ScaleFit {
  double u = 1;
  double r2 = 0;
  double rms = 0;
  double rms_before = 0;
  double worst_before = 0;
  double worst_after = 0;
};
ScaleFit fit_scale(const std::vector<double>& work, const std::vector<double>& seconds,
                   double u_before) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < work.size(); ++i) {
    num += work[i] / seconds[i];
    den += (work[i] / seconds[i]) * (work[i] / seconds[i]);
  }
  ScaleFit f;
  f.u = num / den;
  std::vector<double> predicted, before, after;
  for (std::size_t i = 0; i < work.size(); ++i) {
    predicted.push_back(work[i] * f.u);
    after.push_back(work[i] * f.u / seconds[i] - 1);
    before.push_back(work[i] * u_before / seconds[i] - 1);
  }
  f.r2 = r_squared(seconds, predicted);
  f.rms = rms_of(after);
  f.rms_before = rms_of(before);
  f.worst_before = worst_of(before);
  f.worst_after = worst_of(after);
  return f;
}

}  // namespace

void fit_probe_kernels(ClusterSpec& cluster, const std::vector<ProbeKernel>& kernels,
                       const std::string& label, CalibrationReport& report) {
  const GpuSpec& gpu = cluster.gpu;
  const double peak = power_limited_compute_share(gpu) * gpu.bf16_dense_flops;
  for (const bool gemm : {true, false}) {
    std::vector<double> work, seconds;
    for (const ProbeKernel& k : kernels) {
      if (k.gemm != gemm) continue;
      work.push_back(gemm ? 2.0 * static_cast<double>(k.m) * static_cast<double>(k.n) *
                                static_cast<double>(k.k) / peak
                          : k.bytes / gpu.hbm_measured_bandwidth_bytes_per_s);
      seconds.push_back(k.seconds);
    }
    if (work.empty()) continue;
    double& eff = gemm ? cluster.compute.gemm_efficiency : cluster.compute.elementwise_efficiency;
    const ScaleFit f = fit_scale(work, seconds, 1.0 / eff);
    const double before = eff;
    std::string note;
    const std::string name = gemm ? "compute.gemm_efficiency" : "compute.elementwise_efficiency";
    eff = bounded_efficiency(1.0 / f.u, name, label, note);
    report.constants.push_back({.name = name,
                                .unit = "",
                                .before = before,
                                .after = eff,
                                .points = static_cast<int64_t>(work.size()),
                                .r2 = f.r2,
                                .rms_relative_error = f.rms,
                                .note = note});
    report.checks.push_back({.what = fmt::format("probe {} ({})", gemm ? "GEMMs" : "copies", label),
                             .points = static_cast<int64_t>(work.size()),
                             .rms_before = f.rms_before,
                             .rms_after = f.rms,
                             .worst_before = f.worst_before,
                             .worst_after = f.worst_after});
  }
}

}  // namespace shardplan
