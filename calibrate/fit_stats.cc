#include "calibrate/fit_stats.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "models/cluster_spec.h"
#include "models/error.h"

namespace shardplan {

double rms_of(const std::vector<double>& errors) {
  if (errors.empty()) return 0;
  double sum = 0;
  for (double e : errors) sum += e * e;
  return std::sqrt(sum / static_cast<double>(errors.size()));
}

double worst_of(const std::vector<double>& errors) {
  double worst = 0;
  for (double e : errors) {
    if (std::abs(e) > std::abs(worst)) worst = e;
  }
  return worst;
}

double r_squared(const std::vector<double>& measured, const std::vector<double>& predicted) {
  if (measured.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  const double mean =
      std::accumulate(measured.begin(), measured.end(), 0.0) / static_cast<double>(measured.size());
  double total = 0, residual = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    total += (measured[i] - mean) * (measured[i] - mean);
    residual += (measured[i] - predicted[i]) * (measured[i] - predicted[i]);
  }
  if (total <= 0) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - residual / total;
}

double bounded_efficiency(double fitted, const std::string& constant,
                          const std::string& measurement, std::string& note) {
  constexpr double kHeldAtPeak = 1.1;
  if (std::isfinite(fitted) && fitted > cluster_bounds::kMaxEfficiency && fitted <= kHeldAtPeak) {
    note = "measured above the peak: held at 1";
    return cluster_bounds::kMaxEfficiency;
  }
  if (std::isfinite(fitted) && fitted >= cluster_bounds::kMinEfficiency &&
      fitted <= cluster_bounds::kMaxEfficiency) {
    return fitted;
  }
  if (!std::isfinite(fitted) || fitted <= 0) {
    throw InputError(measurement, constant,
                     fmt::format("the fit gives {:g}, not an efficiency: the measured times do "
                                 "not fit the planned work (are they of another job?)",
                                 fitted));
  }
  if (fitted < cluster_bounds::kMinEfficiency) {
    throw InputError(measurement, constant,
                     fmt::format("fitted to {:.3g}, below the {:g} of its peak any working GPU "
                                 "sustains (docs/formats.md, Limits): these kernels ran {:.0f} "
                                 "times slower than the datasheet; a measurement of another GPU "
                                 "or job, or times in the wrong unit?",
                                 fitted, cluster_bounds::kMinEfficiency, 1.0 / fitted));
  }
  throw InputError(measurement, constant,
                   fmt::format("fitted to {:.3g}: these kernels ran {:.3g} times faster than "
                               "the GPU's datasheet peak; a measurement of another job, or a "
                               "peak wrong in the cluster file?",
                               fitted, fitted));
}

}  // namespace shardplan
