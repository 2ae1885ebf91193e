#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "calibrate/calibrate.h"
#include "calibrate/fit_stats.h"
#include "models/cluster_spec.h"
#include "models/error.h"
#include "simulator/compute_model.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

// The kernel classes a compute op's time is made of (simulator/compute_model.h).
enum Class { kBf16Gemm, kFp8Gemm, kAttention, kMemory, kOptimizer, kClasses };

std::array<double, kClasses> class_work(const ComputeWork& w) {
  return {w.bf16_gemm, w.fp8_gemm, w.attention, w.memory, w.optimizer};
}

double& efficiency_of(ComputeSpec& e, Class c, bool sdpa) {
  switch (c) {
    case kBf16Gemm:
      return e.gemm_efficiency;
    case kFp8Gemm:
      return e.fp8_gemm_efficiency;
    case kAttention:
      return sdpa ? e.sdpa_attention_efficiency : e.attention_efficiency;
    case kMemory:
      return e.elementwise_efficiency;
    default:
      return e.optimizer_efficiency;
  }
}

std::string class_name(Class c, bool sdpa) {
  switch (c) {
    case kBf16Gemm:
      return "compute.gemm_efficiency";
    case kFp8Gemm:
      return "compute.fp8_gemm_efficiency";
    case kAttention:
      return sdpa ? "compute.sdpa_attention_efficiency" : "compute.attention_efficiency";
    case kMemory:
      return "compute.elementwise_efficiency";
    default:
      return "compute.optimizer_efficiency";
  }
}

bool is_compute(const PlanOp& op) {
  return op.kind == OpKind::forward || op.kind == OpKind::backward ||
         op.kind == OpKind::recompute || op.kind == OpKind::optimizer_step;
}

// The share of [start, end) during which a collective was in flight (merged intervals).
double overlapped_share(const TimelineOp& op, const std::vector<std::pair<double, double>>& busy) {
  const double length = op.end - op.start;
  if (length <= 0) return 0;
  double covered = 0;
  for (const auto& [a, b] : busy) {
    if (a >= op.end) break;
    covered += std::max(0.0, std::min(b, op.end) - std::max(a, op.start));
  }
  return std::clamp(covered / length, 0.0, 1.0);
}

// Measured ops belong to this plan: same ids, same names.
void check_same_plan(const Plan& plan, const Timeline& measured, const std::string& label) {
  if (measured.source != "measured") {
    throw InputError(label, "source",
                     fmt::format("{}: calibrate needs a timeline `shardplan execute` measured "
                                 "for this plan (source 'measured')",
                                 quote_input(measured.source)));
  }
  for (std::size_t i = 0; i < measured.ops.size(); ++i) {
    const TimelineOp& t = measured.ops[i];
    if (t.op < 0 || static_cast<std::size_t>(t.op) >= plan.ops.size() ||
        plan.ops[static_cast<std::size_t>(t.op)].name != t.name) {
      throw InputError(label, fmt::format("ops/{}", i),
                       fmt::format("op {} {} is not in the plan: the timeline was measured "
                                   "for another plan",
                                   t.op, quote_input(t.name)));
    }
    if (!(t.end - t.start <= kMaxMeasuredSeconds)) {
      throw InputError(label, fmt::format("ops/{}", i),
                       fmt::format("op {} lasts {:g} s: no op of a training step lasts an hour "
                                   "({:g} s); are the times in another unit?",
                                   quote_input(t.name), t.end - t.start, kMaxMeasuredSeconds));
    }
  }
}

}  // namespace

void fit_compute(ClusterSpec& cluster, const Plan& plan, const Timeline& measured,
                 const std::string& label, CalibrationReport& report) {
  check_same_plan(plan, measured, label);
  const ClusterSpec before = cluster;
  const bool sdpa = sdpa_attention(plan.config);
  std::vector<std::pair<double, double>> busy;
  for (const TimelineOp& t : measured.ops) {
    if (is_collective(plan.ops[static_cast<std::size_t>(t.op)].kind) && t.end > t.start)
      busy.emplace_back(t.start, t.end);
  }
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& iv : busy) {
    if (!merged.empty() && iv.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, iv.second);
    } else {
      merged.push_back(iv);
    }
  }
  struct Row {
    std::array<double, kClasses> work;
    double measured;
    double overlap;
  };
  std::vector<Row> rows;
  std::array<bool, kClasses> used{};
  for (const TimelineOp& t : measured.ops) {
    const PlanOp& op = plan.ops[static_cast<std::size_t>(t.op)];
    if (!is_compute(op) || t.end <= t.start) continue;
    const auto work = class_work(compute_work(plan, op, cluster));
    for (int c = 0; c < kClasses; ++c)
      used[static_cast<std::size_t>(c)] |= work[static_cast<std::size_t>(c)] > 0;
    rows.push_back({work, t.end - t.start, overlapped_share(t, merged)});
  }
  if (rows.empty()) {
    throw InputError(label, "ops", "no compute op with a measured duration to fit");
  }
  std::vector<Class> classes;
  for (int c = 0; c < kClasses; ++c) {
    if (used[static_cast<std::size_t>(c)]) classes.push_back(static_cast<Class>(c));
  }
  ComputeSpec& e = cluster.compute;
  const auto n = static_cast<Eigen::Index>(rows.size());
  const auto m = static_cast<Eigen::Index>(classes.size());
  // Errors in seconds, so ops count by their share of the step (what the step time is
  // made of): row i is op i's work per class. Columns scaled to unit norm so the rank test
  // does not depend on units.
  Eigen::MatrixXd a(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j)
      a(i, j) = rows[static_cast<std::size_t>(i)].work[classes[static_cast<std::size_t>(j)]];
  const Eigen::VectorXd norms = a.colwise().norm().transpose();
  const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a * norms.cwiseInverse().asDiagonal());
  const bool separate = qr.rank() == m;
  const double overlap_total = [&] {
    double s = 0, total = 0;
    for (const Row& r : rows) {
      s += r.overlap * r.measured;
      total += r.measured;
    }
    return s / total;
  }();
  const bool fit_overlap = overlap_total > 0.01;
  double slowdown = e.overlap_slowdown;
  Eigen::VectorXd prior(m);  // 1 / efficiency per class, as the cluster has it
  for (Eigen::Index j = 0; j < m; ++j)
    prior(j) = 1.0 / efficiency_of(e, classes[static_cast<std::size_t>(j)], sdpa);
  Eigen::VectorXd u = prior;
  double raw_w = 1;  // the overlap fit's last 1 / (1 + slowdown), before its bounds
  // Alternate: efficiencies with the slowdown fixed, then the slowdown with them fixed.
  for (int pass = 0; pass < 50; ++pass) {
    Eigen::VectorXd target(n);  // each op's time without the slowdown
    double total = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const Row& r = rows[static_cast<std::size_t>(i)];
      target(i) = r.measured * (1.0 - r.overlap + r.overlap / (1.0 + slowdown));
      total += r.measured;
    }
    // First one scale for every class (the prior's ratios), then each class on its own,
    // held weakly (ridge: 1e-4 of the step per class) to that common scale: a class the
    // ops cannot tell from another stays at the common scale instead of going anywhere.
    const Eigen::VectorXd p = a * prior;
    const double common = p.dot(target) / p.squaredNorm();
    const Eigen::VectorXd anchor = prior * common;
    const double lambda = 1e-2 * total / std::sqrt(static_cast<double>(n));
    Eigen::MatrixXd augmented(n + m, m);
    Eigen::VectorXd rhs(n + m);
    augmented.topRows(n) = a * anchor.asDiagonal();
    augmented.bottomRows(m) = lambda * Eigen::MatrixXd::Identity(m, m);
    rhs.head(n) = target;
    rhs.tail(m) = Eigen::VectorXd::Constant(m, lambda);
    const Eigen::VectorXd v = augmented.colPivHouseholderQr().solve(rhs);
    u = (v.array() > 0).all() ? Eigen::VectorXd(anchor.cwiseProduct(v)) : anchor;
    if (!fit_overlap) break;
    // target_i = d_i (1 − o_i) + d_i o_i w, w = 1 / (1 + s): least squares in w.
    const Eigen::VectorXd base = a * u;
    double num = 0, den = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const Row& r = rows[static_cast<std::size_t>(i)];
      const double x = r.measured * r.overlap;
      num += x * (base(i) - r.measured * (1.0 - r.overlap));
      den += x * x;
    }
    // w in [1 / (1 + max slowdown), 1]: a slowdown outside [0, max] is not kept but
    // refused below if the fit ends there (overlap never speeds compute up: w above 1 is
    // noise around no slowdown, held at 0).
    raw_w = num / den;
    const double w = std::clamp(raw_w, 1.0 / (1.0 + cluster_bounds::kMaxOverlapSlowdown), 1.0);
    const double next = 1.0 / w - 1.0;
    if (std::abs(next - slowdown) < 1e-9) break;
    slowdown = next;
  }
  if (fit_overlap && !(raw_w >= 1.0 / (1.0 + cluster_bounds::kMaxOverlapSlowdown))) {
    throw InputError(label, "compute.overlap_slowdown",
                     fmt::format("compute ops overlapping collectives ran {:.3g} times as long "
                                 "as alone, above the {:g} the model accepts (Lee et al. 2025 "
                                 "measure 1.4 at worst): are these ops of another plan?",
                                 1.0 / raw_w, 1.0 + cluster_bounds::kMaxOverlapSlowdown));
  }
  std::vector<double> measured_times, predicted_times, errors;
  for (Eigen::Index i = 0; i < n; ++i) {
    const Row& r = rows[static_cast<std::size_t>(i)];
    const double alone = a.row(i).dot(u);
    // Inverse of the target above: the measured op ran slowed for its overlapped share.
    const double predicted = alone / (1.0 - r.overlap + r.overlap / (1.0 + slowdown));
    measured_times.push_back(r.measured);
    predicted_times.push_back(predicted);
    errors.push_back(predicted / r.measured - 1);
  }
  const double r2 = r_squared(measured_times, predicted_times);
  const double rms = rms_of(errors);
  for (Eigen::Index j = 0; j < m; ++j) {
    const Class c = classes[static_cast<std::size_t>(j)];
    double& eff = efficiency_of(e, c, sdpa);
    const double old = eff;
    std::string note =
        separate ? "" : "not separable from the other classes here: held near their common scale";
    eff = bounded_efficiency(1.0 / u(j), class_name(c, sdpa), label, note);
    report.constants.push_back({.name = class_name(c, sdpa),
                                .unit = "",
                                .before = old,
                                .after = eff,
                                .points = n,
                                .r2 = r2,
                                .rms_relative_error = rms,
                                .fitted = true,
                                .note = note});
  }
  if (fit_overlap) {
    e.overlap_slowdown = slowdown;
    report.constants.push_back(
        {.name = "compute.overlap_slowdown",
         .unit = "",
         .before = before.compute.overlap_slowdown,
         .after = e.overlap_slowdown,
         .points = n,
         .r2 = r2,
         .rms_relative_error = rms,
         .fitted = true,
         .note = fmt::format("{:.0f} % of compute time overlapped", 100 * overlap_total)});
  }
  const double step = measured.summary.step_seconds;
  const double step_before = simulate(plan, before).summary.step_seconds;
  const double step_after = simulate(plan, cluster).summary.step_seconds;
  std::vector<double> errors_before;
  for (const Row& r : rows) {
    const double alone = compute_seconds(
        [&] {
          ComputeWork w;
          w.bf16_gemm = r.work[kBf16Gemm];
          w.fp8_gemm = r.work[kFp8Gemm];
          w.attention = r.work[kAttention];
          w.memory = r.work[kMemory];
          w.optimizer = r.work[kOptimizer];
          w.sdpa = sdpa;
          return w;
        }(),
        before.compute);
    const double slowed =
        alone / (1.0 - r.overlap + r.overlap / (1.0 + before.compute.overlap_slowdown));
    errors_before.push_back(slowed / r.measured - 1);
  }
  report.checks.push_back({.what = fmt::format("compute op times ({})", label),
                           .points = n,
                           .rms_before = rms_of(errors_before),
                           .rms_after = rms,
                           .worst_before = worst_of(errors_before),
                           .worst_after = worst_of(errors)});
  if (step > 0) {
    report.checks.push_back({.what = fmt::format("step time ({})", label),
                             .points = 1,
                             .rms_before = std::abs(step_before / step - 1),
                             .rms_after = std::abs(step_after / step - 1),
                             .worst_before = step_before / step - 1,
                             .worst_after = step_after / step - 1});
  }
}

}  // namespace shardplan

namespace shardplan {

void fit_trace_compute(ClusterSpec& cluster, const Plan& plan, const std::vector<TracedStep>& steps,
                       const std::string& label, CalibrationReport& report) {
  if (steps.empty()) throw InputError(label, "traceEvents", "no profiler step to fit");
  // The plan's work per class over one step, at efficiency 1.
  ComputeWork planned;
  for (const PlanOp& op : plan.ops) {
    if (!is_compute(op)) continue;
    const ComputeWork w = compute_work(plan, op, cluster);
    planned.bf16_gemm += w.bf16_gemm;
    planned.fp8_gemm += w.fp8_gemm;
    planned.attention += w.attention;
    planned.memory += w.memory;
    planned.optimizer += w.optimizer;
  }
  const bool sdpa = sdpa_attention(plan.config);
  const ComputeSpec before = cluster.compute;
  const std::array<double, kClasses> work = class_work(planned);
  // Measured seconds per class, in class_work's order; device copies and sets are
  // memory-bound work too.
  auto measured_of = [](const KernelClassSeconds& k, Class c) {
    const std::array<double, kClasses> t = {k.gemm, k.fp8_gemm, k.attention,
                                            k.elementwise + k.copies, k.optimizer};
    return t[static_cast<std::size_t>(c)];
  };
  std::vector<double> step_measured;
  for (const TracedStep& s : steps) {
    double total = 0;
    for (int c = 0; c < kClasses; ++c) total += measured_of(s.kernels, static_cast<Class>(c));
    step_measured.push_back(total);
  }
  for (int ci = 0; ci < kClasses; ++ci) {
    const auto c = static_cast<Class>(ci);
    const double planned_work = work[static_cast<std::size_t>(ci)];
    std::vector<double> times;
    double sum = 0;
    for (const TracedStep& s : steps) {
      times.push_back(measured_of(s.kernels, c));
      sum += times.back();
    }
    double& eff = efficiency_of(cluster.compute, c, sdpa);
    const double old = eff;
    if (planned_work <= 0 && sum <= 0) continue;
    FittedConstant fitted{.name = class_name(c, sdpa),
                          .unit = "",
                          .before = old,
                          .after = old,
                          .points = static_cast<int64_t>(steps.size()),
                          .r2 = std::numeric_limits<double>::quiet_NaN(),
                          .rms_relative_error = 0,
                          .fitted = false};
    if (planned_work <= 0) {
      fitted.note = fmt::format(
          "the trace has {:.4g} s of these kernels per step that the plan has no work for: "
          "kept (is the trace of another job?)",
          sum / static_cast<double>(steps.size()));
    } else if (sum <= 0) {
      fitted.note = "no kernels of this class in the trace: kept";
    } else {
      // Least squares of work ÷ efficiency against each step's time of the class, in
      // seconds: 1 ÷ efficiency = Σ time ÷ (steps × work).
      eff = bounded_efficiency(planned_work * static_cast<double>(steps.size()) / sum,
                               class_name(c, sdpa), label, fitted.note);
      std::vector<double> predicted(times.size(), planned_work / eff), errors;
      for (std::size_t i = 0; i < times.size(); ++i) errors.push_back(predicted[i] / times[i] - 1);
      fitted.after = eff;
      fitted.fitted = true;
      fitted.rms_relative_error = rms_of(errors);
      if (times.size() >= 3) fitted.r2 = r_squared(times, predicted);
    }
    report.constants.push_back(std::move(fitted));
  }
  auto predicted_compute = [&](const ComputeSpec& e) {
    ComputeWork w = planned;
    w.sdpa = sdpa;
    return compute_seconds(w, e);
  };
  std::vector<double> errors_before, errors_after;
  for (double m : step_measured) {
    if (m <= 0) continue;
    errors_before.push_back(predicted_compute(before) / m - 1);
    errors_after.push_back(predicted_compute(cluster.compute) / m - 1);
  }
  if (!errors_before.empty()) {
    report.checks.push_back({.what = fmt::format("compute kernel time per step ({})", label),
                             .points = static_cast<int64_t>(errors_before.size()),
                             .rms_before = rms_of(errors_before),
                             .rms_after = rms_of(errors_after),
                             .worst_before = worst_of(errors_before),
                             .worst_after = worst_of(errors_after)});
  }
}

}  // namespace shardplan
