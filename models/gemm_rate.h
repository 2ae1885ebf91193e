#pragma once

// How long a GEMM of a given shape runs on one GPU: a kernel model fitted to a measured
// table of that GPU (a microbenchmark, never a training run), so that a GEMM split eight
// ways by tensor parallelism or an expert fed a few hundred tokens runs at its own rate
// rather than at one efficiency for every shape. docs/model.md, "GEMMs by shape".
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/module_cost.h"

namespace shardplan {

enum class GemmPrecision { bf16, fp8 };

// One measured GEMM: `groups` matmuls of m × n × k each in one launch (1: a plain GEMM).
struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  int64_t groups = 1;
  double seconds = 0;
};

// A GPU's measured table of one precision and its fitted kernel model (docs/model.md,
// "GEMMs by shape"):
//
//   t = launch_seconds + max(compute, memory)
//   compute = 2 · tile_m · tile_n · work ÷ (peak ÷ SMs × core_efficiency)
//   work    = min((ceil(tiles ÷ SMs) + fill_waves) · (k + tile_overhead_k),
//                 (1 + split_k_fixup) · tiles · (k + tile_overhead_k) ÷ SMs
//                   + fill_waves · (k + tile_overhead_k))
//   memory  = bytes read and written once ÷ (HBM bandwidth × memory_efficiency)
//
// Waves of output tiles over the SMs (wave quantization), a per-tile cost of
// tile_overhead_k columns of K (prologue, epilogue), fill_waves of pipeline fill per
// launch; split-K / stream-K kernels spread a few tiles' K over every SM at a fixup cost
// (cuBLAS's segment-K kernels), which is what lets a small-M·N, large-K GEMM run near the
// peak; a GEMM that reads its weights for a few rows is bound by HBM; every launch costs
// at least launch_seconds on the GPU. A grouped table (one launch of several experts'
// GEMMs) gets its own fit, since grouped kernels run below dense ones of the same size.
// Where a query lies near measured points the model's ratio to them is carried over
// (gemm_seconds), so a measured shape gets its measured time.
struct GemmTable {
  GemmPrecision precision = GemmPrecision::bf16;
  bool grouped = false;
  std::string source;
  std::vector<GemmPoint> points;
  // The GPU the table was measured on, given to fit_gemm_table:
  double peak_flops = 0;  // the dense peak of `precision`
  int64_t sms = 0;
  double hbm_bytes_per_s = 0;  // datasheet; 0: no memory term
  // Fitted:
  int64_t tile_m = 128, tile_n = 256;
  double core_efficiency = 0;
  double fill_waves = 0;
  double tile_overhead_k = 0;
  double split_k_fixup = kNoSplitK;
  double launch_seconds = 0;
  double memory_efficiency = 1;
  std::vector<double> residuals;  // measured ÷ model time, per point
  // Where each point lies (log2 of one group's m, n, k and the groups), for gemm_seconds.
  std::vector<std::array<double, 4>> positions;
  // A table measured on a sibling GPU (the B200 of an HGX board for the B200 of a GB200
  // rack): its name, and how much faster this GPU runs the same shapes (a microbenchmark's
  // ratio, never a training run's). Queries compare their peak with reference_peak_flops,
  // this GPU's datasheet peak; 0 there means the table's own.
  std::string measured_on;
  double relative_speed = 1;
  double reference_peak_flops = 0;

  static constexpr double kNoSplitK = 1e300;  // every tile runs its whole K
};

// Fits the table's model: least squares in log time, the tile, split-K fixup, overhead
// and fill on a grid, the launch time, memory and core efficiencies by coordinate descent
// (with weak priors where the table's shapes cannot tell them: 4 µs and 0.8, the fits of
// docs/research/kernels/kernel_rates.md). Needs at least three points. A table fitted
// before (same points and GPU) is fitted once per process.
void fit_gemm_table(GemmTable& table, double peak_flops, int64_t sms, double hbm_bytes_per_s);

// Seconds the table's GPU takes for `shape` (a grouped shape splits its tokens over its
// groups) at `peak_flops` (the power-limited peak of the table's precision); `peak_flops`
// above the table's (or its reference_peak_flops) scales the time down in proportion, and a
// table carried from a sibling GPU runs relative_speed times faster.
double gemm_seconds(const GemmTable& table, const GemmShape& shape, double peak_flops);

// The model alone, without the measured points' correction (tests, docs).
double gemm_model_seconds(const GemmTable& table, const GemmShape& shape);

}  // namespace shardplan
