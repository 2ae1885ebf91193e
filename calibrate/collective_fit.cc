#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "calibrate/calibrate.h"
#include "calibrate/fit_stats.h"
#include "models/error.h"

namespace shardplan {
namespace {

// The regime the model picks for one sample under the cluster's current scales, and the
// model's unscaled latency and transfer time there.
struct Assignment {
  std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol> regime;
  double latency = 0;   // seconds, before scaling
  double transfer = 0;  // bus bytes ÷ bus bandwidth, seconds, before scaling
};

// `protocol`: only that protocol's candidates (none may apply: latency stays infinite).
Assignment assign(const ClusterSpec& cluster, const CollectiveSample& s,
                  std::optional<NcclProtocol> protocol = std::nullopt) {
  Assignment best;
  best.latency = std::numeric_limits<double>::infinity();
  double best_seconds = std::numeric_limits<double>::infinity();
  for (const CollectiveCandidate& c : collective_candidates(cluster, s.op, s.bytes, s.layout)) {
    // A run held to one algorithm; p2p collectives have only their own.
    if (s.algorithm && c.algorithm != *s.algorithm && c.algorithm != NcclAlgorithm::p2p) continue;
    if (protocol && c.protocol != *protocol) continue;
    const CollectiveCalibration* k = calibration_of(cluster, c);
    const double ls = k ? k->latency_scale : 1.0;
    const double bs = k ? k->bandwidth_scale : 1.0;
    const double seconds = ls * c.latency_seconds + c.bus_bytes / (bs * c.bus_bandwidth);
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = {{c.tier, c.algorithm, c.protocol}, c.latency_seconds, c.bus_bytes / c.bus_bandwidth};
    }
  }
  return best;
}

CollectiveCalibration& entry_for(ClusterSpec& cluster,
                                 const std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>& r) {
  for (CollectiveCalibration& k : cluster.collective_calibration) {
    if (std::tie(k.tier, k.algorithm, k.protocol) == r) return k;
  }
  cluster.collective_calibration.push_back(
      {.tier = std::get<0>(r), .algorithm = std::get<1>(r), .protocol = std::get<2>(r)});
  return cluster.collective_calibration.back();
}

// Least squares on relative errors: rows (latency / t, transfer / t), target 1, unknowns
// (s_lat, 1 / s_bw). Falls back to one unknown when the points cannot separate the two
// (one point, or latency and transfer in the same ratio everywhere) or the joint fit
// gives a non-physical sign. The scales are left as fitted: fit_collectives refuses a
// final one outside cluster_bounds.
void fit_regime(const std::vector<const CollectiveSample*>& points,
                const std::vector<Assignment>& terms, CollectiveCalibration& k) {
  const auto n = static_cast<Eigen::Index>(points.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double t = points[static_cast<std::size_t>(i)]->seconds;
    a(i, 0) = terms[static_cast<std::size_t>(i)].latency / t;
    a(i, 1) = terms[static_cast<std::size_t>(i)].transfer / t;
  }
  // Both terms, unless one is under 2 % of the points' time at the joint solution: it then
  // cannot be told from noise (a latency fitted to 8 GiB transfers comes out anywhere),
  // and the other is fitted alone.
  if (n >= 2) {
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
    if (qr.rank() == 2) {
      const Eigen::Vector2d x = qr.solve(b);
      const double latency_share = a.col(0).sum() * x(0) / static_cast<double>(n);
      const double transfer_share = a.col(1).sum() * x(1) / static_cast<double>(n);
      if (x(0) > 0 && x(1) > 0 && latency_share > 0.02 && transfer_share > 0.02) {
        k.latency_scale = x(0);
        k.bandwidth_scale = 1.0 / x(1);
        return;
      }
    }
  }
  const double latency_share = a.col(0).sum() * k.latency_scale;
  const double transfer_share = a.col(1).sum() / k.bandwidth_scale;
  // One unknown: the term that dominates these points, the other kept.
  if (latency_share >= transfer_share) {
    const Eigen::VectorXd rest = b - a.col(1) / k.bandwidth_scale;
    const double s = a.col(0).dot(rest) / a.col(0).squaredNorm();
    if (s > 0) k.latency_scale = s;
  } else {
    const Eigen::VectorXd rest = b - a.col(0) * k.latency_scale;
    const double u = a.col(1).dot(rest) / a.col(1).squaredNorm();
    if (u > 0) k.bandwidth_scale = 1.0 / u;
  }
}

// The latency scale alone, the bandwidth scale held.
void fit_latency(const std::vector<const CollectiveSample*>& points,
                 const std::vector<Assignment>& terms, CollectiveCalibration& k) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double t = points[i]->seconds;
    const double x = terms[i].latency / t;
    num += x * (1.0 - terms[i].transfer / (k.bandwidth_scale * t));
    den += x * x;
  }
  if (den > 0 && num > 0) k.latency_scale = num / den;
}

// What fit_regime needs of a run of points of one protocol, as sums over them of its
// rows (a0 = latency ÷ t, a1 = transfer ÷ t; target 1): prefix sums give any run's in
// O(1), so the cut search below does not refit each run point by point (it did: cubic in
// the sizes of a series, 12.6 s for a 1,000-row log).
struct LineSums {
  double s00 = 0, s01 = 0, s11 = 0, s0 = 0, s1 = 0;
  double n = 0;
  int64_t unavailable = 0;  // points this protocol cannot run

  void add(const Assignment& a, double seconds) {
    if (!std::isfinite(a.latency)) {
      ++unavailable;
      return;
    }
    const double a0 = a.latency / seconds, a1 = a.transfer / seconds;
    s00 += a0 * a0;
    s01 += a0 * a1;
    s11 += a1 * a1;
    s0 += a0;
    s1 += a1;
    n += 1;
  }
  LineSums operator-(const LineSums& o) const {
    return {s00 - o.s00,
            s01 - o.s01,
            s11 - o.s11,
            s0 - o.s0,
            s1 - o.s1,
            n - o.n,
            unavailable - o.unavailable};
  }
};

// The residual (sum of squared relative errors) of fit_regime's line, fitted from unit
// scales, to the points summed in `s`, in closed form: both terms if the normal equations
// have a physical solution where each carries 2 % of the time, else the dominant one
// alone. Infinite if the protocol cannot run one of the points.
double line_residual(const LineSums& s) {
  if (s.unavailable > 0 || s.n == 0) return std::numeric_limits<double>::infinity();
  double ls = 1, bs = 1;
  bool joint = false;
  const double det = s.s00 * s.s11 - s.s01 * s.s01;
  // Rank 2: the columns are not parallel (relative to their norms, as a QR's rank test).
  if (s.n >= 2 && det > 1e-12 * s.s00 * s.s11) {
    const double x0 = (s.s11 * s.s0 - s.s01 * s.s1) / det;
    const double x1 = (s.s00 * s.s1 - s.s01 * s.s0) / det;
    if (x0 > 0 && x1 > 0 && s.s0 * x0 / s.n > 0.02 && s.s1 * x1 / s.n > 0.02) {
      ls = x0;
      bs = 1.0 / x1;
      joint = true;
    }
  }
  if (!joint) {
    if (s.s0 >= s.s1) {
      const double v = (s.s0 - s.s01) / s.s00;
      if (v > 0) ls = v;
    } else {
      const double u = (s.s1 - s.s01) / s.s11;
      if (u > 0) bs = 1.0 / u;
    }
  }
  // Σ (ls a0 + a1 / bs − 1)², expanded.
  const double residual = ls * ls * s.s00 + 2.0 * ls / bs * s.s01 + s.s11 / (bs * bs) -
                          2.0 * ls * s.s0 - 2.0 * s.s1 / bs + s.n;
  return std::max(residual, 0.0);
}

// A first assignment that does not depend on the uncalibrated model picking the right
// protocol: NCCL moves from LL to LL128 to Simple as messages grow, so each series of
// one collective on one layout is cut at two sizes into those three protocols (each
// part empty or of two sizes at least), where lines fit it best. Within a protocol the
// algorithm is the model's pick.
std::vector<Assignment> segment_assignment(const ClusterSpec& cluster,
                                           const std::vector<CollectiveSample>& samples) {
  std::vector<Assignment> out(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) out[i] = assign(cluster, samples[i]);
  std::map<std::tuple<Collective, int64_t, int64_t, int>, std::vector<std::size_t>> series;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const CollectiveSample& s = samples[i];
    series[{s.op, s.layout.ranks, s.layout.ranks_per_node,
            s.algorithm ? static_cast<int>(*s.algorithm) : -1}]
        .push_back(i);
  }
  constexpr NcclProtocol kOrder[3] = {NcclProtocol::ll, NcclProtocol::ll128, NcclProtocol::simple};
  for (auto& entry : series) {
    std::vector<std::size_t>& members = entry.second;
    std::stable_sort(members.begin(), members.end(), [&](std::size_t x, std::size_t y) {
      return samples[x].bytes < samples[y].bytes;
    });
    // Distinct sizes: cuts fall between them, never between two samples of one size.
    std::vector<std::size_t> starts;
    for (std::size_t k = 0; k < members.size(); ++k) {
      if (k == 0 || samples[members[k]].bytes != samples[members[k - 1]].bytes) starts.push_back(k);
    }
    const std::size_t m = starts.size();
    if (m < 2) continue;
    auto begin_of = [&](std::size_t size_index) {
      return size_index < m ? starts[size_index] : members.size();
    };
    std::vector<std::array<Assignment, 3>> by_protocol(members.size());
    // prefix[p][k]: protocol p's sums over members [0, k).
    std::array<std::vector<LineSums>, 3> prefix;
    for (auto& sums : prefix) sums.assign(members.size() + 1, LineSums{});
    for (std::size_t k = 0; k < members.size(); ++k) {
      for (int p = 0; p < 3; ++p) {
        by_protocol[k][p] = assign(cluster, samples[members[k]], kOrder[p]);
        prefix[p][k + 1] = prefix[p][k];
        prefix[p][k + 1].add(by_protocol[k][p], samples[members[k]].seconds);
      }
    }
    // LL on sizes [0, i), LL128 on [i, j), Simple on [j, m).
    auto cost = [&](std::size_t i, std::size_t j) {
      const std::size_t cut[4] = {0, i, j, m};
      double total = 0;
      for (int p = 0; p < 3; ++p) {
        const std::size_t sizes = cut[p + 1] - cut[p];
        if (sizes == 0) continue;
        if (sizes < 2) return std::numeric_limits<double>::infinity();
        total += line_residual(prefix[p][begin_of(cut[p + 1])] - prefix[p][begin_of(cut[p])]);
      }
      return total;
    };
    double best_cost = std::numeric_limits<double>::infinity();
    std::array<std::size_t, 2> best_cut{0, 0};
    auto consider = [&](std::size_t i, std::size_t j) {
      const double c = cost(i, j);
      if (c < best_cost) {
        best_cost = c;
        best_cut = {i, j};
      }
    };
    // Every pair of cuts on a grid of at most about 512 sizes (every size when the series
    // has no more), then every pair within one grid step of the best: O(m + 512²) instead
    // of O(m²) pairs on the long series of an nccl-tests sweep with a fixed increment.
    const std::size_t stride = std::max<std::size_t>(1, (m + 511) / 512);
    std::vector<std::size_t> grid;
    for (std::size_t c = 0; c < m; c += stride) grid.push_back(c);
    grid.push_back(m);
    for (std::size_t a = 0; a < grid.size(); ++a) {
      for (std::size_t b = a; b < grid.size(); ++b) consider(grid[a], grid[b]);
    }
    if (stride > 1 && std::isfinite(best_cost)) {
      const auto [ci, cj] = best_cut;
      for (std::size_t i = ci > stride ? ci - stride : 0; i <= std::min(ci + stride, m); ++i) {
        for (std::size_t j = std::max(i, cj > stride ? cj - stride : 0);
             j <= std::min(cj + stride, m); ++j)
          consider(i, j);
      }
    }
    if (!std::isfinite(best_cost)) continue;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const int p = k < begin_of(best_cut[0]) ? 0 : k < begin_of(best_cut[1]) ? 1 : 2;
      out[members[k]] = by_protocol[k][p];
    }
  }
  return out;
}

// As the run ran: under its NCCL_ALGO, if it had one.
double predict(const ClusterSpec& c, const CollectiveSample& s) {
  const Assignment a = assign(c, s);
  const CollectiveCalibration* k = calibration_of(c, {.algorithm = std::get<1>(a.regime),
                                                      .protocol = std::get<2>(a.regime),
                                                      .tier = std::get<0>(a.regime)});
  return (k ? k->latency_scale : 1.0) * a.latency + a.transfer / (k ? k->bandwidth_scale : 1.0);
}

using Regime = std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>;

struct FitRun {
  ClusterSpec cluster;
  double rms = std::numeric_limits<double>::infinity();
};

// Assign, fit, repeat while the assignment changes; keep the best pass (a regime the new
// scales make win may fit worse than the one it displaced).
FitRun run_passes(ClusterSpec cluster, const std::vector<CollectiveSample>& samples,
                  bool segmented_start) {
  std::vector<Assignment> assignment(samples.size());
  std::vector<Assignment> previous;
  FitRun best;
  for (int pass = 0; pass < 32; ++pass) {
    if (pass == 0 && segmented_start) {
      assignment = segment_assignment(cluster, samples);
    } else {
      for (std::size_t i = 0; i < samples.size(); ++i) assignment[i] = assign(cluster, samples[i]);
    }
    const bool same =
        !previous.empty() &&
        std::equal(assignment.begin(), assignment.end(), previous.begin(),
                   [](const Assignment& x, const Assignment& y) { return x.regime == y.regime; });
    if (same) break;
    previous = assignment;
    std::map<Regime, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < samples.size(); ++i) groups[assignment[i].regime].push_back(i);
    // Simple first: the low-latency protocols' bandwidth is capped by it below.
    std::vector<std::pair<Regime, std::vector<std::size_t>>> ordered(groups.begin(), groups.end());
    std::stable_partition(ordered.begin(), ordered.end(), [](const auto& g) {
      return std::get<2>(g.first) == NcclProtocol::simple;
    });
    for (const auto& [regime, members] : ordered) {
      std::vector<const CollectiveSample*> points;
      std::vector<Assignment> terms;
      for (std::size_t i : members) {
        points.push_back(&samples[i]);
        terms.push_back(assignment[i]);
      }
      CollectiveCalibration& k = entry_for(cluster, regime);
      k.points = static_cast<int64_t>(points.size());
      fit_regime(points, terms, k);
      // LL and LL128 carry less data per line than Simple (NCCL's wire formats: 8 bytes
      // for 4 of data, 128 for 120), which the model's protocol shares already count:
      // no protocol's bandwidth scale may exceed Simple's on the same tier and algorithm.
      // Fitted to small sizes alone, where time is nearly all latency, it otherwise comes
      // out far too fast and undercuts the protocols that really run at mid sizes.
      if (std::get<2>(regime) == NcclProtocol::simple) continue;
      const CollectiveCalibration* simple =
          calibration_of(cluster, {.algorithm = std::get<1>(regime),
                                   .protocol = NcclProtocol::simple,
                                   .tier = std::get<0>(regime)});
      const double cap = simple ? simple->bandwidth_scale : 1.0;
      if (k.bandwidth_scale > cap) {
        k.bandwidth_scale = cap;
        fit_latency(points, terms, k);
      }
    }
    std::vector<double> errors;
    for (const CollectiveSample& s : samples) errors.push_back(predict(cluster, s) / s.seconds - 1);
    const double rms = rms_of(errors);
    // The first pass stands until one fits better; a first pass that is not finite (a
    // scale fitted to inf) gives way to any finite one, and check_scales refuses what
    // stays absurd rather than the fit falling back to no calibration without a word.
    if (pass == 0 || rms < best.rms || (!std::isfinite(best.rms) && std::isfinite(rms)))
      best = {cluster, rms};
  }
  return best;
}

// A fitted scale outside cluster_bounds is not a network (a cluster file refuses it), so
// the measurements that gave it are named rather than the scale clamped.
void check_scales(const ClusterSpec& cluster, const std::vector<CollectiveSample>& samples,
                  const std::map<Regime, std::vector<std::size_t>>& groups) {
  for (const CollectiveCalibration& k : cluster.collective_calibration) {
    for (const auto& [what, scale] :
         {std::pair{"latency", k.latency_scale}, {"bandwidth", k.bandwidth_scale}}) {
      if (scale >= cluster_bounds::kMinCalibrationScale &&
          scale <= cluster_bounds::kMaxCalibrationScale)
        continue;
      const auto found = groups.find({k.tier, k.algorithm, k.protocol});
      const CollectiveSample& first = samples[found == groups.end() ? 0 : found->second.front()];
      throw InputError(
          first.where, "collective_calibration",
          fmt::format("the measured times give {} {}/{} a {} scale of {:.3g}, outside [{:g}, "
                      "{:g}] of NCCL's own constants: times in another unit, or a log of "
                      "another network?",
                      network_tier_name(k.tier), nccl_algorithm_name(k.algorithm),
                      nccl_protocol_name(k.protocol), what, scale,
                      cluster_bounds::kMinCalibrationScale, cluster_bounds::kMaxCalibrationScale));
    }
  }
}

}  // namespace

void fit_collectives(ClusterSpec& cluster, const std::vector<CollectiveSample>& samples,
                     CalibrationReport& report) {
  if (samples.empty()) return;
  // A sample the model cannot run as it ran (NCCL_ALGO=nvls for an all-gather, or on a
  // cluster without NVLS) has nothing to fit.
  for (const CollectiveSample& s : samples) {
    if (!std::isfinite(assign(cluster, s).latency)) {
      throw InputError(
          s.where, "--nccl-algo",
          fmt::format("{} over {} ranks cannot run as {} on {} in shardplan's "
                      "model (NCCL has no such algorithm for it there)",
                      collective_name(s.op), s.layout.ranks,
                      s.algorithm ? nccl_algorithm_name(*s.algorithm) : "any", cluster.name));
    }
  }
  const ClusterSpec before = cluster;
  // Two starts, the better kept: the model's own picks (right when its protocol choice
  // is), and the series cut into protocols by size (right when the uncalibrated model
  // switches protocol at the wrong size).
  FitRun best = run_passes(cluster, samples, false);
  FitRun segmented = run_passes(cluster, samples, true);
  if (segmented.rms < best.rms) best = std::move(segmented);
  cluster.collective_calibration = best.cluster.collective_calibration;

  // Per regime: the points it now explains, its fit quality, and its constants at the
  // layout of its first point, as the model costs them there.
  std::map<std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < samples.size(); ++i)
    groups[assign(cluster, samples[i]).regime].push_back(i);
  check_scales(cluster, samples, groups);
  for (CollectiveCalibration& k : cluster.collective_calibration) {
    const auto regime = std::make_tuple(k.tier, k.algorithm, k.protocol);
    const auto found = groups.find(regime);
    if (found == groups.end()) {
      // Fitted in an earlier pass to points another regime now wins; kept, since the best
      // pass's error counts it (it may win between the measured sizes), and said so.
      if (calibration_of(before,
                         {.algorithm = k.algorithm, .protocol = k.protocol, .tier = k.tier}) !=
          nullptr)
        continue;
      k.r2 = std::numeric_limits<double>::quiet_NaN();
      report.constants.push_back(
          {.name = fmt::format("{} {}/{} scales (latency, bandwidth)", network_tier_name(k.tier),
                               nccl_algorithm_name(k.algorithm), nccl_protocol_name(k.protocol)),
           .unit = "",
           .before = 1.0,
           .after = k.latency_scale,
           .points = k.points,
           .r2 = k.r2,
           .rms_relative_error = k.rms_relative_error,
           .note = fmt::format("bandwidth scale {:.4g}; fitted in an earlier pass, wins at no "
                               "measured size now",
                               k.bandwidth_scale)});
      continue;
    }
    std::vector<double> measured, predicted, errors;
    for (std::size_t i : found->second) {
      measured.push_back(samples[i].seconds);
      predicted.push_back(predict(cluster, samples[i]));
      errors.push_back(predicted.back() / measured.back() - 1);
    }
    k.points = static_cast<int64_t>(found->second.size());
    k.r2 = r_squared(measured, predicted);
    k.rms_relative_error = rms_of(errors);
    const CollectiveSample& first = samples[found->second.front()];
    double latency = 0, busbw = 0;
    for (const CollectiveCandidate& c :
         collective_candidates(cluster, first.op, first.bytes, first.layout)) {
      if (std::make_tuple(c.tier, c.algorithm, c.protocol) != regime) continue;
      latency = c.latency_seconds;
      busbw = c.bus_bandwidth;
    }
    const CollectiveCalibration* old =
        calibration_of(before, {.algorithm = k.algorithm, .protocol = k.protocol, .tier = k.tier});
    const double old_ls = old ? old->latency_scale : 1.0;
    const double old_bs = old ? old->bandwidth_scale : 1.0;
    const std::string name = fmt::format(
        "{} {}/{} ({} over {}, {} per node)", network_tier_name(k.tier),
        nccl_algorithm_name(k.algorithm), nccl_protocol_name(k.protocol), collective_name(first.op),
        first.layout.ranks, std::min(first.layout.ranks, first.layout.ranks_per_node));
    const bool latency_fitted = old_ls != k.latency_scale;
    const bool bandwidth_fitted = old_bs != k.bandwidth_scale;
    // Kept: under 2 % of the regime's time, too few sizes to separate, or (bandwidth of
    // LL/LL128) capped at Simple's.
    const std::string kept = "kept: these points cannot tell it";
    report.constants.push_back({.name = name + " latency",
                                .unit = "us",
                                .before = old_ls * latency * 1e6,
                                .after = k.latency_scale * latency * 1e6,
                                .points = k.points,
                                .r2 = k.r2,
                                .rms_relative_error = k.rms_relative_error,
                                .fitted = latency_fitted,
                                .note = latency_fitted ? "" : kept});
    report.constants.push_back({.name = name + " bus bandwidth",
                                .unit = "GB/s",
                                .before = old_bs * busbw * 1e-9,
                                .after = k.bandwidth_scale * busbw * 1e-9,
                                .points = k.points,
                                .r2 = k.r2,
                                .rms_relative_error = k.rms_relative_error,
                                .fitted = bandwidth_fitted,
                                .note = bandwidth_fitted ? "" : kept});
  }
  std::vector<double> errors_before, errors_after;
  for (const CollectiveSample& s : samples) {
    errors_before.push_back(predict(before, s) / s.seconds - 1);
    errors_after.push_back(predict(cluster, s) / s.seconds - 1);
  }
  report.checks.push_back({.what = "collective times",
                           .points = static_cast<int64_t>(samples.size()),
                           .rms_before = rms_of(errors_before),
                           .rms_after = rms_of(errors_after),
                           .worst_before = worst_of(errors_before),
                           .worst_after = worst_of(errors_after)});
}

}  // namespace shardplan
