#pragma once

// How long a GEMM of a given shape runs on one GPU: a kernel model fitted to a measured
// table of that GPU (a microbenchmark, never a training run), so that a GEMM split eight
// ways by tensor parallelism or an expert fed a few hundred tokens runs at its own rate
// rather than at one efficiency for every shape. docs/model.md, "GEMMs by shape".
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

// The output tile one thread block computes: cuBLAS's and CUTLASS's large Hopper/Blackwell
// BF16 and FP8 tile (CUTLASS's sm90 examples use 128 × 256 × 64; of 128 × 128, 128 × 256
// and 256 × 128 it fits the H200 table best, docs/model.md).
inline constexpr int64_t kGemmTileM = 128;
inline constexpr int64_t kGemmTileN = 256;

// A GPU's measured table of one precision and its fitted kernel model. A tile of the
// output takes 2 · tile_m · tile_n · (k + tile_overhead_k) FLOPs of one SM's share of the
// peak at core_efficiency; a launch runs ceil(tiles ÷ SMs) + fill_waves waves (the
// pipeline's fill and drain); a grouped table (one launch of several experts' GEMMs)
// gets its own fit, since grouped kernels run below dense ones of the same size. Where a
// query lies near measured points the model's ratio to them is carried over
// (gemm_seconds), so a measured shape gets its measured time.
struct GemmTable {
  GemmPrecision precision = GemmPrecision::bf16;
  bool grouped = false;
  std::string source;
  std::vector<GemmPoint> points;
  // Fitted by fit_gemm_table against peak_flops and sms:
  double peak_flops = 0;  // the dense peak of `precision` the table was measured against
  int64_t sms = 0;
  double core_efficiency = 0;
  double fill_waves = 0;
  double tile_overhead_k = 0;
  std::vector<double> residuals;  // measured ÷ model time, per point
};

// Fits the table's model (least squares in log time; fill_waves and tile_overhead_k on a
// grid, core_efficiency in closed form for each). Needs at least three points.
void fit_gemm_table(GemmTable& table, double peak_flops, int64_t sms);

// Seconds the table's GPU takes for `shape` (a grouped shape splits its tokens over its
// groups) at `peak_flops` (the power-limited peak of the table's precision); `peak_flops`
// above the table's scales the time down in proportion.
double gemm_seconds(const GemmTable& table, const GemmShape& shape, double peak_flops);

// The model alone, without the measured points' correction (tests, docs).
double gemm_model_seconds(const GemmTable& table, const GemmShape& shape);

}  // namespace shardplan
