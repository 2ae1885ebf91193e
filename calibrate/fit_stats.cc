#include "calibrate/fit_stats.h"

#include <cmath>
#include <limits>
#include <numeric>

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

}  // namespace shardplan
