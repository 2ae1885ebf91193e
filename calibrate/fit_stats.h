#pragma once

#include <string>
#include <vector>

namespace shardplan {

// Root mean square of relative errors.
double rms_of(const std::vector<double>& errors);
// The error largest in magnitude, with its sign.
double worst_of(const std::vector<double>& errors);
// Coefficient of determination of `predicted` against `measured`: 1 − SS_res ÷ SS_tot;
// NaN with fewer than three points or no spread in `measured`.
double r_squared(const std::vector<double>& measured, const std::vector<double>& predicted);

// The longest a measured op, kernel or collective may last: no op of a training step
// lasts an hour. Longer is a unit slip or a broken clock, and a 1e308-second op made the
// fitted efficiency so small that simulating the fitted cluster never ended.
inline constexpr double kMaxMeasuredSeconds = 3600;
// The largest message a measured collective may move: 1 PiB, 2^16 times the 16 GiB
// nccl-tests' largest default sweeps reach.
inline constexpr double kMaxCollectiveBytes = 0x1p50;

// A fitted efficiency as a cluster file may hold it (cluster_bounds in
// models/cluster_spec.h). A fit up to 10 % above the peak is held at 1 and `note` says so
// (the model's work counts are approximate: causal attention counted as half its square,
// fused kernels' FLOPs); a fit further above, or below 1 % of the peak, or not finite, is
// an InputError naming the measurement and the constant.
double bounded_efficiency(double fitted, const std::string& constant,
                          const std::string& measurement, std::string& note);

}  // namespace shardplan
