#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "calibrate/calibrate.h"
#include "calibrate/fit_stats.h"

namespace shardplan {
namespace {

// The regime the model picks for one sample under the cluster's current scales, and the
// model's unscaled latency and transfer time there.
struct Assignment {
  std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol> regime;
  double latency = 0;   // seconds, before scaling
  double transfer = 0;  // bus bytes ÷ bus bandwidth, seconds, before scaling
};

Assignment assign(const ClusterSpec& cluster, const CollectiveSample& s) {
  Assignment best;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (const CollectiveCandidate& c : collective_candidates(cluster, s.op, s.bytes, s.layout)) {
    // A run held to one algorithm; p2p collectives have only their own.
    if (s.algorithm && c.algorithm != *s.algorithm && c.algorithm != NcclAlgorithm::p2p) continue;
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

// Scales outside this range are a fit gone wrong, not a network (cluster_spec.cc reads
// the same range back).
double clamp_scale(double s) {
  return std::clamp(s, 1e-3, 1e3);
}

// Least squares on relative errors: rows (latency / t, transfer / t), target 1, unknowns
// (s_lat, 1 / s_bw). Falls back to one unknown when the points cannot separate the two
// (one point, or latency and transfer in the same ratio everywhere) or the joint fit
// gives a non-physical sign. Returns whether both were fitted.
bool fit_regime(const std::vector<const CollectiveSample*>& points,
                const std::vector<Assignment>& terms, CollectiveCalibration& k) {
  const auto n = static_cast<Eigen::Index>(points.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double t = points[static_cast<std::size_t>(i)]->seconds;
    a(i, 0) = terms[static_cast<std::size_t>(i)].latency / t;
    a(i, 1) = terms[static_cast<std::size_t>(i)].transfer / t;
  }
  // A term under 2 % of the points' time cannot be told from noise: fit the other alone
  // (a latency fitted to 8 GiB transfers comes out anywhere).
  const double latency_share = a.col(0).sum() * k.latency_scale / static_cast<double>(n);
  const double transfer_share = a.col(1).sum() / k.bandwidth_scale / static_cast<double>(n);
  const bool both_matter = latency_share > 0.02 && transfer_share > 0.02;
  if (n >= 2 && both_matter) {
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
    if (qr.rank() == 2) {
      const Eigen::Vector2d x = qr.solve(b);
      if (x(0) > 0 && x(1) > 0) {
        k.latency_scale = clamp_scale(x(0));
        k.bandwidth_scale = clamp_scale(1.0 / x(1));
        return true;
      }
    }
  }
  // One unknown: the term that dominates these points, the other kept.
  if (latency_share >= transfer_share) {
    const Eigen::VectorXd rest = b - a.col(1) / k.bandwidth_scale;
    k.latency_scale = clamp_scale(a.col(0).dot(rest) / a.col(0).squaredNorm());
  } else {
    const Eigen::VectorXd rest = b - a.col(0) * k.latency_scale;
    const double u = a.col(1).dot(rest) / a.col(1).squaredNorm();
    if (u > 0) k.bandwidth_scale = clamp_scale(1.0 / u);
  }
  return false;
}

}  // namespace

void fit_collectives(ClusterSpec& cluster, const std::vector<CollectiveSample>& samples,
                     CalibrationReport& report) {
  if (samples.empty()) return;
  const ClusterSpec before = cluster;
  // As the run ran: under its NCCL_ALGO, if it had one.
  auto predict = [&](const ClusterSpec& c, const CollectiveSample& s) {
    const Assignment a = assign(c, s);
    const CollectiveCalibration* k = calibration_of(c, {.algorithm = std::get<1>(a.regime),
                                                        .protocol = std::get<2>(a.regime),
                                                        .tier = std::get<0>(a.regime)});
    return (k ? k->latency_scale : 1.0) * a.latency + a.transfer / (k ? k->bandwidth_scale : 1.0);
  };
  // Assign, fit, repeat while the assignment changes; keep the best pass (a regime the
  // new scales make win may fit worse than the one it displaced).
  std::vector<Assignment> assignment(samples.size());
  std::vector<Assignment> previous;
  ClusterSpec best = cluster;
  double best_rms = std::numeric_limits<double>::infinity();
  std::map<std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>, bool> separated;
  std::map<std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>, bool> best_separated;
  for (int pass = 0; pass < 32; ++pass) {
    for (std::size_t i = 0; i < samples.size(); ++i) assignment[i] = assign(cluster, samples[i]);
    const bool same =
        !previous.empty() &&
        std::equal(assignment.begin(), assignment.end(), previous.begin(),
                   [](const Assignment& x, const Assignment& y) { return x.regime == y.regime; });
    if (same) break;
    previous = assignment;
    std::map<std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < samples.size(); ++i) groups[assignment[i].regime].push_back(i);
    for (const auto& [regime, members] : groups) {
      std::vector<const CollectiveSample*> points;
      std::vector<Assignment> terms;
      for (std::size_t i : members) {
        points.push_back(&samples[i]);
        terms.push_back(assignment[i]);
      }
      CollectiveCalibration& k = entry_for(cluster, regime);
      separated[regime] = fit_regime(points, terms, k);
    }
    std::vector<double> errors;
    for (const CollectiveSample& s : samples) errors.push_back(predict(cluster, s) / s.seconds - 1);
    const double rms = rms_of(errors);
    if (rms < best_rms) {
      best_rms = rms;
      best = cluster;
      best_separated = separated;
    }
  }
  cluster.collective_calibration = best.collective_calibration;

  // Per regime: the points it now explains, its fit quality, and its constants at the
  // layout of its first point, as the model costs them there.
  std::map<std::tuple<NetworkTier, NcclAlgorithm, NcclProtocol>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < samples.size(); ++i)
    groups[assign(cluster, samples[i]).regime].push_back(i);
  std::erase_if(cluster.collective_calibration, [&](const CollectiveCalibration& k) {
    return !groups.contains({k.tier, k.algorithm, k.protocol}) &&
           calibration_of(before,
                          {.algorithm = k.algorithm, .protocol = k.protocol, .tier = k.tier}) ==
               nullptr;
  });
  for (CollectiveCalibration& k : cluster.collective_calibration) {
    const auto regime = std::make_tuple(k.tier, k.algorithm, k.protocol);
    const auto found = groups.find(regime);
    if (found == groups.end()) continue;
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
    const std::string name =
        fmt::format("{} {}/{} ({} ranks, {} per node)", network_tier_name(k.tier),
                    nccl_algorithm_name(k.algorithm), nccl_protocol_name(k.protocol),
                    first.layout.ranks, std::min(first.layout.ranks, first.layout.ranks_per_node));
    const bool both = best_separated[regime];
    const std::string note = both ? "" : "one of latency and bandwidth fitted, the other kept";
    report.constants.push_back({.name = name + " latency",
                                .unit = "us",
                                .before = old_ls * latency * 1e6,
                                .after = k.latency_scale * latency * 1e6,
                                .points = k.points,
                                .r2 = k.r2,
                                .rms_relative_error = k.rms_relative_error,
                                .fitted = both || old_ls != k.latency_scale,
                                .note = note});
    report.constants.push_back({.name = name + " bus bandwidth",
                                .unit = "GB/s",
                                .before = old_bs * busbw * 1e-9,
                                .after = k.bandwidth_scale * busbw * 1e-9,
                                .points = k.points,
                                .r2 = k.r2,
                                .rms_relative_error = k.rms_relative_error,
                                .fitted = both || old_bs != k.bandwidth_scale,
                                .note = note});
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
