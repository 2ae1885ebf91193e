#include "models/gemm_rate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace shardplan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// One group's matmul: the tokens (m, or k for a weight gradient) split over the groups,
// rounded up: an expert runs whole rows.
GemmShape one_group(const GemmShape& s) {
  GemmShape g = s;
  if (s.groups > 1) {
    if (s.weight_gradient)
      g.k = ceil_div(s.k, s.groups);
    else
      g.m = ceil_div(s.m, s.groups);
  }
  return g;
}

// Seconds at core efficiency 1: waves of tiles, each of an SM's share of the peak.
double unit_seconds(const GemmShape& shape, int64_t sms, double peak_flops, double fill_waves,
                    double tile_overhead_k) {
  const GemmShape g = one_group(shape);
  const int64_t tiles =
      ceil_div(g.m, kGemmTileM) * ceil_div(g.n, kGemmTileN) * std::max<int64_t>(shape.groups, 1);
  const double waves = static_cast<double>(ceil_div(tiles, sms)) + fill_waves;
  const double tile_flops =
      2.0 * kGemmTileM * kGemmTileN * (static_cast<double>(g.k) + tile_overhead_k);
  return waves * tile_flops / (peak_flops / static_cast<double>(sms));
}

// Where a shape lies, in octaves, for carrying a measured point's ratio to its neighbours.
std::array<double, 4> position(const GemmShape& s) {
  const GemmShape g = one_group(s);
  return {std::log2(static_cast<double>(g.m)), std::log2(static_cast<double>(g.n)),
          std::log2(static_cast<double>(g.k)),
          std::log2(static_cast<double>(std::max<int64_t>(s.groups, 1)))};
}

GemmShape shape_of(const GemmPoint& p) {
  // A point's m is one group's: the table's shapes are as the benchmark ran them.
  return {.m = p.m * p.groups, .n = p.n, .k = p.k, .groups = p.groups};
}

}  // namespace

void fit_gemm_table(GemmTable& table, double peak_flops, int64_t sms) {
  if (table.points.size() < 3) throw std::invalid_argument("a GEMM table needs three points");
  table.peak_flops = peak_flops;
  table.sms = sms;
  double best = INFINITY;
  // 0–2 waves of fill in steps of 0.05 and 0–2048 columns of K in steps of 32: a
  // 41 × 65 grid, about a millisecond for a table of 50 points.
  for (int w = 0; w <= 40; ++w) {
    for (int o = 0; o <= 64; ++o) {
      const double fill = 0.05 * w, overhead = 32.0 * o;
      std::vector<double> log_ratio;
      for (const GemmPoint& p : table.points) {
        log_ratio.push_back(
            std::log(unit_seconds(shape_of(p), sms, peak_flops, fill, overhead) / p.seconds));
      }
      // Least squares in log time: log t = log unit − log e, so log e is the mean ratio.
      double mean = 0;
      for (double r : log_ratio) mean += r;
      mean /= static_cast<double>(log_ratio.size());
      double sse = 0;
      for (double r : log_ratio) sse += (r - mean) * (r - mean);
      if (sse < best) {
        best = sse;
        table.fill_waves = fill;
        table.tile_overhead_k = overhead;
        table.core_efficiency = std::exp(mean);
      }
    }
  }
  table.residuals.clear();
  for (const GemmPoint& p : table.points)
    table.residuals.push_back(p.seconds / gemm_model_seconds(table, shape_of(p)));
}

double gemm_model_seconds(const GemmTable& table, const GemmShape& shape) {
  return unit_seconds(shape, table.sms, table.peak_flops, table.fill_waves, table.tile_overhead_k) /
         table.core_efficiency;
}

double gemm_seconds(const GemmTable& table, const GemmShape& shape, double peak_flops) {
  // A Gaussian of half an octave around each measured point; far from all of them the
  // model stands alone (the prior's weight, 0.05, is that of a point 1.2 octaves away).
  constexpr double kSigma = 0.5, kPriorWeight = 0.05;
  const std::array<double, 4> q = position(shape);
  double weight = kPriorWeight, weighted = kPriorWeight;
  for (std::size_t i = 0; i < table.points.size(); ++i) {
    const std::array<double, 4> p = position(shape_of(table.points[i]));
    double d2 = 0;
    for (std::size_t j = 0; j < q.size(); ++j) d2 += (q[j] - p[j]) * (q[j] - p[j]);
    const double w = std::exp(-d2 / (2 * kSigma * kSigma));
    weight += w;
    weighted += w * table.residuals[i];
  }
  return gemm_model_seconds(table, shape) * (weighted / weight) * (table.peak_flops / peak_flops);
}

}  // namespace shardplan
