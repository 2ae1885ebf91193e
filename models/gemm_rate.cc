#include "models/gemm_rate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

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

// The shape constants of the fit: everything but the three continuous efficiencies.
struct TileForm {
  int64_t tile_m = 128, tile_n = 256;
  double fill_waves = 0, tile_overhead_k = 0, split_k_fixup = GemmTable::kNoSplitK;
};

TileForm form_of(const GemmTable& t) {
  return {t.tile_m, t.tile_n, t.fill_waves, t.tile_overhead_k, t.split_k_fixup};
}

// Seconds of compute at core efficiency 1: waves of tiles, each of an SM's share of the
// peak, or the same tile-iterations spread evenly over the SMs (split-K) at a fixup cost.
double compute_seconds(const GemmShape& shape, const TileForm& f, int64_t sms, double peak_flops) {
  const GemmShape g = one_group(shape);
  const auto tiles = static_cast<double>(ceil_div(g.m, f.tile_m) * ceil_div(g.n, f.tile_n) *
                                         std::max<int64_t>(shape.groups, 1));
  const double columns = static_cast<double>(g.k) + f.tile_overhead_k;
  const double s = static_cast<double>(sms);
  const double waves = (std::ceil(tiles / s) + f.fill_waves) * columns;
  const double split = (1 + f.split_k_fixup) * tiles * columns / s + f.fill_waves * columns;
  const double tile_flops = 2.0 * static_cast<double>(f.tile_m * f.tile_n);
  return std::min(waves, split) * tile_flops / (peak_flops / s);
}

// Bytes a GEMM must move at least once: both inputs and the output (2-byte outputs;
// FP8 inputs are 1 byte).
double memory_bytes(const GemmShape& shape, GemmPrecision precision) {
  const GemmShape g = one_group(shape);
  const double in = precision == GemmPrecision::fp8 ? 1 : 2;
  const auto m = static_cast<double>(g.m), n = static_cast<double>(g.n),
             k = static_cast<double>(g.k);
  return static_cast<double>(std::max<int64_t>(shape.groups, 1)) *
         (in * (m * k + k * n) + 2 * m * n);
}

// The launch, core and memory constants of a table (or of a fit's trial).
struct Efficiencies {
  double launch_seconds, core_efficiency, memory_efficiency, hbm_bytes_per_s;
};

double model_seconds(double compute, double bytes, const Efficiencies& e) {
  const double memory =
      e.hbm_bytes_per_s > 0 ? bytes / (e.hbm_bytes_per_s * e.memory_efficiency) : 0;
  return e.launch_seconds + std::max(compute / e.core_efficiency, memory);
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

// The three continuous constants and their bounds. Where the table's shapes cannot tell
// one (no small shape for the launch time, no HBM-bound one for the memory efficiency), a
// weak prior holds it at the value the research fits found on tables that can
// (docs/research/kernels/kernel_rates.md, b.3: launch 3.5-6 µs on XLA's H100 and B200
// tables, memory efficiency 0.6-0.9).
constexpr double kPriorLaunch = 4e-6, kPriorLaunchScale = 2e-6;
constexpr double kPriorMemory = 0.8, kPriorMemoryScale = 0.1;
constexpr double kPriorWeight = 1e-4;  // of the mean squared log error
constexpr double kMaxLaunch = 10e-6;

struct Loss {
  const std::vector<double>& compute;
  const std::vector<double>& bytes;
  const std::vector<double>& log_measured;
  const GemmTable& base;
  double operator()(double launch, double memory_eff, double core_eff) const {
    const Efficiencies t{launch, core_eff, memory_eff, base.hbm_bytes_per_s};
    double sse = 0;
    for (std::size_t i = 0; i < compute.size(); ++i) {
      const double r = std::log(model_seconds(compute[i], bytes[i], t)) - log_measured[i];
      sse += r * r;
    }
    const double a = (launch - kPriorLaunch) / kPriorLaunchScale;
    const double b = (memory_eff - kPriorMemory) / kPriorMemoryScale;
    return sse / static_cast<double>(compute.size()) + kPriorWeight * (a * a + b * b);
  }
};

// The minimum of a unimodal f on [lo, hi] (golden section, 24 steps: 1e-5 of the range).
template <typename F>
double golden_min(F f, double lo, double hi) {
  constexpr double kInv = 0.6180339887498949;
  double a = lo, b = hi;
  double c = b - kInv * (b - a), d = a + kInv * (b - a);
  double fc = f(c), fd = f(d);
  for (int i = 0; i < 24; ++i) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - kInv * (b - a);
      fc = f(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + kInv * (b - a);
      fd = f(d);
    }
  }
  return (a + b) / 2;
}

struct Fit {
  TileForm form;
  double launch = kPriorLaunch, memory_eff = kPriorMemory, core_eff = 0.8;
  double loss = INFINITY;
};

// The core efficiency that best fits with the other constants held (the loss is unimodal
// in it: each point's model time falls with it until HBM bounds it).
void fit_core(const Loss& loss, Fit& fit) {
  fit.core_eff =
      golden_min([&](double e) { return loss(fit.launch, fit.memory_eff, e); }, 0.02, 1.0);
  fit.loss = loss(fit.launch, fit.memory_eff, fit.core_eff);
}

// Coordinate descent on the three continuous constants from where `fit` stands.
void refine(const Loss& loss, Fit& fit) {
  for (int sweep = 0; sweep < 4; ++sweep) {
    const double before = fit.loss;
    fit.launch =
        golden_min([&](double l) { return loss(l, fit.memory_eff, fit.core_eff); }, 0, kMaxLaunch);
    fit.memory_eff =
        golden_min([&](double m) { return loss(fit.launch, m, fit.core_eff); }, 0.3, 1.0);
    fit_core(loss, fit);
    if (before - fit.loss < 1e-9) break;
  }
}

using FitKey = std::tuple<std::vector<std::array<double, 5>>, double, int64_t, double, int>;

Fit fit_table(const GemmTable& table) {
  std::vector<double> log_measured;
  for (const GemmPoint& p : table.points) log_measured.push_back(std::log(p.seconds));
  std::vector<double> bytes;
  for (const GemmPoint& p : table.points)
    bytes.push_back(memory_bytes(shape_of(p), table.precision));
  // The shape constants on a grid: the two tiles of cuBLAS's and CUTLASS's large
  // Hopper/Blackwell kernels (128 × 128 fits small-shape tables, 128 × 256 LLM-sized ones:
  // kernel_rates.md b.3), split-K fixups from none to a whole extra pass, 0-512 columns of
  // per-tile overhead, 0-0.5 waves of fill. Each gets its best core efficiency at the prior
  // launch and memory constants; the best few are refined in all three.
  std::vector<Fit> candidates;
  std::vector<double> compute(table.points.size());
  for (const auto& [tm, tn] : {std::pair<int64_t, int64_t>{128, 128}, {128, 256}}) {
    for (double fixup : {0.0, 0.25, 0.5, 1.0, GemmTable::kNoSplitK}) {
      for (int o = 0; o <= 8; ++o) {
        for (double fill : {0.0, 0.1, 0.2, 0.3, 0.5}) {
          Fit fit{.form = {tm, tn, fill, 64.0 * o, fixup}};
          for (std::size_t i = 0; i < table.points.size(); ++i)
            compute[i] =
                compute_seconds(shape_of(table.points[i]), fit.form, table.sms, table.peak_flops);
          fit_core(Loss{compute, bytes, log_measured, table}, fit);
          candidates.push_back(fit);
        }
      }
    }
  }
  constexpr std::size_t kRefined = 24;
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(kRefined),
                    candidates.end(), [](const Fit& a, const Fit& b) { return a.loss < b.loss; });
  Fit best;
  for (std::size_t c = 0; c < kRefined; ++c) {
    Fit fit = candidates[c];
    for (std::size_t i = 0; i < table.points.size(); ++i)
      compute[i] =
          compute_seconds(shape_of(table.points[i]), fit.form, table.sms, table.peak_flops);
    refine(Loss{compute, bytes, log_measured, table}, fit);
    if (fit.loss < best.loss) best = fit;
  }
  return best;
}

}  // namespace

void fit_gemm_table(GemmTable& table, double peak_flops, int64_t sms, double hbm_bytes_per_s) {
  if (table.points.size() < 3) throw std::invalid_argument("a GEMM table needs three points");
  table.peak_flops = peak_flops;
  table.sms = sms;
  table.hbm_bytes_per_s = hbm_bytes_per_s;
  // Tables are read with every cluster file; a search reads the same few many times.
  static std::mutex mutex;
  static std::map<FitKey, Fit> fitted;
  FitKey key;
  auto& [points, peak, sm_count, hbm, precision] = key;
  for (const GemmPoint& p : table.points) {
    points.push_back({static_cast<double>(p.m), static_cast<double>(p.n), static_cast<double>(p.k),
                      static_cast<double>(p.groups), p.seconds});
  }
  peak = peak_flops;
  sm_count = sms;
  hbm = hbm_bytes_per_s;
  precision = static_cast<int>(table.precision);
  Fit fit;
  {
    const std::lock_guard lock(mutex);
    auto it = fitted.find(key);
    if (it == fitted.end()) it = fitted.emplace(key, fit_table(table)).first;
    fit = it->second;
  }
  table.tile_m = fit.form.tile_m;
  table.tile_n = fit.form.tile_n;
  table.fill_waves = fit.form.fill_waves;
  table.tile_overhead_k = fit.form.tile_overhead_k;
  table.split_k_fixup = fit.form.split_k_fixup;
  table.launch_seconds = fit.launch;
  table.memory_efficiency = fit.memory_eff;
  table.core_efficiency = fit.core_eff;
  table.residuals.clear();
  table.positions.clear();
  for (const GemmPoint& p : table.points) {
    table.residuals.push_back(p.seconds / gemm_model_seconds(table, shape_of(p)));
    table.positions.push_back(position(shape_of(p)));
  }
}

double gemm_model_seconds(const GemmTable& table, const GemmShape& shape) {
  return model_seconds(compute_seconds(shape, form_of(table), table.sms, table.peak_flops),
                       memory_bytes(shape, table.precision),
                       {table.launch_seconds, table.core_efficiency, table.memory_efficiency,
                        table.hbm_bytes_per_s});
}

double gemm_seconds(const GemmTable& table, const GemmShape& shape, double peak_flops) {
  // A Gaussian of half an octave around each measured point; far from all of them the
  // model stands alone (the prior's weight, 0.05, is that of a point 1.2 octaves away).
  constexpr double kSigma = 0.5, kPriorWeight = 0.05;
  const std::array<double, 4> q = position(shape);
  double weight = kPriorWeight, weighted = kPriorWeight;
  for (std::size_t i = 0; i < table.points.size(); ++i) {
    const std::array<double, 4>& p = table.positions[i];
    double d2 = 0;
    for (std::size_t j = 0; j < q.size(); ++j) d2 += (q[j] - p[j]) * (q[j] - p[j]);
    const double w = std::exp(-d2 / (2 * kSigma * kSigma));
    weight += w;
    weighted += w * table.residuals[i];
  }
  const double reference =
      table.reference_peak_flops > 0 ? table.reference_peak_flops : table.peak_flops;
  return gemm_model_seconds(table, shape) * (weighted / weight) * (reference / peak_flops) /
         table.relative_speed;
}

}  // namespace shardplan
