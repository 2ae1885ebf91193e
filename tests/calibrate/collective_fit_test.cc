// Collective calibration: scales recovered exactly from measurements the model itself
// made with known scales, and published nccl-tests tables predicted at sizes the fit
// never saw.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "calibrate/calibrate.h"
#include "models/error.h"

namespace shardplan {
namespace {

// The truth's times at 1 KiB .. 8 GiB, where the truth's scales leave NCCL's choice as the
// plain model makes it: where they do not, the times cannot tell which regime ran them.
std::vector<CollectiveSample> model_samples(const ClusterSpec& truth, const ClusterSpec& plain,
                                            Collective op, RankLayout layout) {
  std::vector<CollectiveSample> out;
  for (double bytes = 1024; bytes <= 8.0 * (1 << 30); bytes *= 2) {
    const CollectiveEstimate t = estimate_collective(truth, op, bytes, layout);
    const CollectiveEstimate p = estimate_collective(plain, op, bytes, layout);
    if (t.algorithm != p.algorithm || t.protocol != p.protocol) continue;
    out.push_back({.op = op,
                   .layout = layout,
                   .bytes = bytes,
                   .seconds = estimate_collective(truth, op, bytes, layout).seconds});
  }
  return out;
}

TEST(CollectiveFit, RecoversKnownScalesExactly) {
  const ClusterSpec plain = load_cluster("dgx-h100", 2, std::nullopt);
  ClusterSpec truth = plain;
  truth.collective_calibration = {{.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::ring,
                                   .protocol = NcclProtocol::ll,
                                   .latency_scale = 1.6,
                                   .bandwidth_scale = 0.8},
                                  {.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::ring,
                                   .protocol = NcclProtocol::ll128,
                                   .latency_scale = 1.3,
                                   .bandwidth_scale = 0.9},
                                  {.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::ring,
                                   .protocol = NcclProtocol::simple,
                                   .latency_scale = 1.2,
                                   .bandwidth_scale = 0.95},
                                  {.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::nvls,
                                   .protocol = NcclProtocol::simple,
                                   .latency_scale = 1.5,
                                   .bandwidth_scale = 0.75},
                                  {.tier = NetworkTier::inter_node,
                                   .algorithm = NcclAlgorithm::tree,
                                   .protocol = NcclProtocol::ll,
                                   .latency_scale = 1.4,
                                   .bandwidth_scale = 0.7}};
  std::vector<CollectiveSample> samples;
  for (Collective op :
       {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
    for (RankLayout layout : {RankLayout{8, 8}, RankLayout{4, 8}, RankLayout{16, 8}}) {
      const auto s = model_samples(truth, plain, op, layout);
      samples.insert(samples.end(), s.begin(), s.end());
    }
  }
  ClusterSpec fitted = plain;
  CalibrationReport report;
  fit_collectives(fitted, samples, report);
  for (const CollectiveSample& s : samples) {
    EXPECT_NEAR(estimate_collective(fitted, s.op, s.bytes, s.layout).seconds / s.seconds, 1.0, 1e-9)
        << collective_name(s.op) << " " << s.bytes << " over " << s.layout.ranks;
  }
  // Every regime the truth picks for some sample, and that spends enough of its time in
  // both terms to tell them apart, comes back as it was.
  int64_t exact = 0;
  for (const CollectiveCalibration& k : fitted.collective_calibration) {
    const CollectiveCalibration unscaled{};
    const CollectiveCalibration* t =
        calibration_of(truth, {.algorithm = k.algorithm, .protocol = k.protocol, .tier = k.tier});
    if (t == nullptr) t = &unscaled;
    if (std::abs(k.latency_scale / t->latency_scale - 1) < 1e-9 &&
        std::abs(k.bandwidth_scale / t->bandwidth_scale - 1) < 1e-9)
      ++exact;
    // Both terms are identifiable only with points on either side of the regime's knee;
    // a regime that wins at two sizes may fit one.
    if (k.points >= 4) {
      EXPECT_NEAR(k.bandwidth_scale, t->bandwidth_scale, 1e-9)
          << k.points << " points " << network_tier_name(k.tier) << " "
          << nccl_algorithm_name(k.algorithm) << "/" << nccl_protocol_name(k.protocol);
    }
  }
  EXPECT_GE(exact, 4);
  ASSERT_EQ(report.checks.size(), 1u);
  EXPECT_LT(report.checks[0].rms_after, 1e-9);
  EXPECT_GT(report.checks[0].rms_before, 0.05);
}

// A series as long as an nccl-tests sweep with a fixed increment prints (2,048 sizes, here
// 1 KiB to 2 GiB): the search for where LL, LL128 and Simple take over runs on a grid and
// around its best cut (it was cubic in the sizes: 12.6 s for 1,000 rows), and the fit is
// still exact on times the model made with known scales.
TEST(CollectiveFit, LongSeriesFitsExactly) {
  const ClusterSpec plain = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  ClusterSpec truth = plain;
  truth.collective_calibration = {{.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::ring,
                                   .protocol = NcclProtocol::ll128,
                                   .latency_scale = 1.3,
                                   .bandwidth_scale = 0.9},
                                  {.tier = NetworkTier::intra_node,
                                   .algorithm = NcclAlgorithm::ring,
                                   .protocol = NcclProtocol::simple,
                                   .latency_scale = 1.2,
                                   .bandwidth_scale = 0.95}};
  std::vector<CollectiveSample> samples;
  const RankLayout layout{8, 8};
  for (int i = 0; i < 2048; ++i) {
    const double bytes = std::round(1024.0 * std::exp2(21.0 * i / 2047.0));
    const CollectiveEstimate t = estimate_collective(truth, Collective::all_gather, bytes, layout);
    const CollectiveEstimate p = estimate_collective(plain, Collective::all_gather, bytes, layout);
    if (t.protocol != p.protocol) continue;
    samples.push_back(
        {.op = Collective::all_gather, .layout = layout, .bytes = bytes, .seconds = t.seconds});
  }
  ASSERT_GT(samples.size(), 1500u);
  ClusterSpec fitted = plain;
  CalibrationReport report;
  fit_collectives(fitted, samples, report);
  ASSERT_EQ(report.checks.size(), 1u);
  EXPECT_LT(report.checks[0].rms_after, 1e-9);
}

// Times a thousand times off NCCL's own constants (microseconds read as seconds) give
// scales no cluster file accepts: an error naming a measurement, not a clamped scale.
TEST(CollectiveFit, ScalesOutsideTheirRangeNameTheMeasurement) {
  const ClusterSpec plain = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  std::vector<CollectiveSample> samples;
  for (double bytes = 1024; bytes <= 8.0 * (1 << 30); bytes *= 2) {
    const double us =
        estimate_collective(plain, Collective::all_gather, bytes, {8, 8}).seconds * 1e6;
    samples.push_back({.op = Collective::all_gather,
                       .layout = {8, 8},
                       .bytes = bytes,
                       .seconds = us,
                       .where = fmt::format("ag.log:{}", samples.size() + 1)});
  }
  ClusterSpec fitted = plain;
  CalibrationReport report;
  try {
    fit_collectives(fitted, samples, report);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "collective_calibration");
    EXPECT_TRUE(e.file().starts_with("ag.log:")) << e.what();
    EXPECT_NE(e.reason().find("outside [0.001, 1000]"), std::string::npos) << e.what();
  }
}

// Fit to every other size of a published table; the sizes in between are predicted.
void expect_held_back_within(const std::vector<CollectiveSample>& samples, double tolerance,
                             std::optional<NcclAlgorithm> algorithm) {
  std::vector<CollectiveSample> fit, held;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    CollectiveSample s = samples[i];
    s.algorithm = algorithm;
    // Out-of-place and in-place samples come in pairs: alternate by size.
    ((i / 2) % 2 == 0 ? fit : held).push_back(s);
  }
  ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  CalibrationReport report;
  fit_collectives(cluster, fit, report);
  for (const CollectiveSample& s : held) {
    if (algorithm) {
      // As the run ran: held to that algorithm.
      cluster.nccl.nvls = *algorithm == NcclAlgorithm::nvls;
    }
    const double predicted = estimate_collective(cluster, s.op, s.bytes, s.layout).seconds;
    EXPECT_NEAR(predicted / s.seconds, 1.0, tolerance)
        << s.where << " " << s.bytes << ": " << predicted * 1e6 << " us against "
        << s.seconds * 1e6;
  }
}

// 8 × H20 (the H100's NVLink4 and NVSwitch), one process per GPU, NCCL 2.30.4, ring
// all-reduce 32 KiB – 1 GiB (tests/data/nccl_tests_8xh100.json "one_rank_per_gpu").
TEST(CollectiveFitPublished, OneRankPerGpuAllReduceHeldBackSizesWithinTenPercent) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl_tests_8xh100.json");
  const nlohmann::json rows =
      nlohmann::json::parse(in).at("one_rank_per_gpu").at("tables").at("all_reduce");
  std::vector<CollectiveSample> samples;
  for (const auto& row : rows) {
    const CollectiveSample s{.op = Collective::all_reduce,
                             .layout = {8, 8},
                             .bytes = row.at(0).get<double>(),
                             .seconds = row.at(1).get<double>() * 1e-6};
    samples.push_back(s);
    samples.push_back(s);  // the pairing expect_held_back_within alternates by
  }
  expect_held_back_within(samples, 0.10, NcclAlgorithm::ring);
}

// 8 × H100, one process driving 8 GPUs, NCCL_ALGO=RING: all-gather, reduce-scatter and
// all-reduce logs as printed (tests/data/nccl-tests/8xh100-g8), rows above the launch floor.
TEST(CollectiveFitPublished, EightH100LogsHeldBackSizesWithinTenPercent) {
  const std::string dir = std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl-tests/8xh100-g8/";
  std::vector<CollectiveSample> samples;
  for (const char* name :
       {"all_gather_ring.out", "reduce_scatter_ring.out", "all_reduce_ring.out"}) {
    const NcclTestsLog log = read_nccl_tests_log(dir + name);
    for (const CollectiveSample& s : log.samples) {
      // all_reduce_ring.out's 512 KiB out-of-place row (69.21 µs against 44.23 in place
      // and 46.52 at 1 MiB) is a hiccup of that run, not the network.
      if (s.bytes == 524288 && s.seconds > 60e-6) continue;
      samples.push_back(s);
    }
  }
  expect_held_back_within(samples, 0.10, NcclAlgorithm::ring);
}

}  // namespace
}  // namespace shardplan
