// `shardplan calibrate` end to end: nccl-tests logs in, a cluster file out that every
// command accepts, and clear errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan {
namespace {

using testing::run_shardplan;

const std::string kLogs = std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl-tests/8xh100-g8/";

TEST(CalibrateCommand, WritesAClusterEveryCommandAccepts) {
  const std::string out =
      (std::filesystem::temp_directory_path() / "shardplan-calibrated-h100.json").string();
  std::filesystem::remove(out);
  const auto r = run_shardplan({"calibrate", "--cluster", "dgx-h100", "--nccl-algo", "ring",
                                "--nccl-tests", kLogs + "all_gather_ring.out", "--nccl-tests",
                                kLogs + "reduce_scatter_ring.out", "--nccl-tests",
                                kLogs + "all_reduce_ring.out", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  ASSERT_FALSE(report.at("constants").empty());
  const nlohmann::json& check = report.at("checks").at(0);
  EXPECT_LT(check.at("rms_relative_error_after").get<double>(),
            check.at("rms_relative_error_before").get<double>());
  std::ifstream in(out);
  const nlohmann::json cluster = nlohmann::json::parse(in);
  EXPECT_EQ(cluster.at("name"), "dgx-h100");
  EXPECT_FALSE(cluster.at("collective_calibration").empty());
  EXPECT_TRUE(cluster.at("sources").contains("collective_calibration"));
  // The calibrated file predicts the log's 1 GiB all-gather (2726.97 µs measured) closer.
  auto predicted_us = [&](const std::string& c) {
    const auto p = run_shardplan(
        {"collective", "--cluster", c, "--op", "all_gather", "--bytes", "1073741824", "--json"});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return nlohmann::json::parse(p.out).at("results").at(0).at("seconds").get<double>() * 1e6;
  };
  EXPECT_LT(std::abs(predicted_us(out) / 2726.97 - 1),
            std::abs(predicted_us("dgx-h100") / 2726.97 - 1));
  const auto sim = run_shardplan({"simulate", "--model", "tiny", "--cluster", out});
  EXPECT_EQ(sim.exit_code, 0) << sim.err;
  std::filesystem::remove(out);
}

TEST(CalibrateCommand, ErrorsNameTheInput) {
  auto r = run_shardplan({"calibrate", "--cluster", "dgx-h100"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nothing to fit"), std::string::npos) << r.err;
  const std::string bad =
      (std::filesystem::temp_directory_path() / "shardplan-bad-all_reduce.log").string();
  {
    std::ofstream f(bad);
    f << "# Collective test starting: all_reduce_perf\n"
         "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
         "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n"
         "  1048576  262144  float  sum  -1  10.00  1.00  1.00  0  10.00  1.00  1.00  0\n";
  }
  const std::string out =
      (std::filesystem::temp_directory_path() / "shardplan-never-written.json").string();
  std::filesystem::remove(out);
  r = run_shardplan({"calibrate", "--nccl-tests", bad, "-o", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 4"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run_shardplan(
      {"calibrate", "--nccl-tests", kLogs + "all_gather_ring.out", "--nccl-algo", "collnet"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--nccl-algo"), std::string::npos) << r.err;
  // All-gather has no NVLS algorithm: the log cannot have run that way.
  r = run_shardplan(
      {"calibrate", "--nccl-tests", kLogs + "all_gather_ring.out", "--nccl-algo", "nvls"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot run as nvls"), std::string::npos) << r.err;
  r = run_shardplan({"calibrate", "--nccl-algo", "ring", "--probe", kLogs + "x.json"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("give the logs"), std::string::npos) << r.err;
  r = run_shardplan({"calibrate", "--measured", kLogs + "x.json"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--plan"), std::string::npos) << r.err;
  std::filesystem::remove(bad);
}

// A calibrated cluster file with a broken entry is refused with its path.
TEST(CalibrateCommand, BrokenCalibrationEntryIsAnError) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "shardplan-broken-calibration.json").string();
  const auto c = run_shardplan({"calibrate", "--nccl-algo", "ring", "--nccl-tests",
                                kLogs + "all_gather_ring.out", "-o", path});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  nlohmann::json cluster;
  {
    std::ifstream in(path);
    cluster = nlohmann::json::parse(in);
  }
  cluster["collective_calibration"][0]["protocol"] = "LL64";
  cluster["collective_calibration"].push_back(cluster["collective_calibration"][0]);
  {
    std::ofstream f(path);
    f << cluster.dump(2);
  }
  auto r = run_shardplan({"collective", "--cluster", path, "--op", "all_gather", "--bytes", "1M"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/collective_calibration/0/protocol"), std::string::npos) << r.err;
  cluster["collective_calibration"][0]["protocol"] = "LL";
  cluster["collective_calibration"][0]["bandwidth_scale"] = 0;
  {
    std::ofstream f(path);
    f << cluster.dump(2);
  }
  r = run_shardplan({"collective", "--cluster", path, "--op", "all_gather", "--bytes", "1M"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bandwidth_scale"), std::string::npos) << r.err;
  std::filesystem::remove(path);
}

// A directory given as a log is named as one (it used to read as an empty log), and a
// fit the cluster file would refuse is an error, with no file written.
TEST(CalibrateCommand, ADirectoryOrAnAbsurdLogIsAClearError) {
  auto r = run_shardplan({"calibrate", "--nccl-tests", kLogs});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  // Times ten thousand times what the fabric takes (a unit slip, or a log of another
  // network): scales that far off NCCL's constants.
  std::string text =
      "# Collective test starting: all_gather_perf\n"
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n";
  for (double bytes = 1 << 20; bytes <= (1 << 30); bytes *= 2) {
    const double us = 1e4 * (20 + 0.5 * bytes / 360e3);
    const double algbw = bytes / (us * 1e3);
    text +=
        fmt::format("{:.0f} {:.0f} float none -1 {:.2f} {:.2f} {:.2f} 0 {:.2f} {:.2f} {:.2f} 0\n",
                    bytes, bytes / 4, us, algbw, algbw / 2, us, algbw, algbw / 2);
  }
  const std::string log = testing::write_temp_file("all_gather_seconds.log", text);
  const std::string out =
      (std::filesystem::temp_directory_path() / "shardplan-absurd-calibrated.json").string();
  std::filesystem::remove(out);
  r = run_shardplan({"calibrate", "--nccl-tests", log, "-o", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("collective_calibration: the measured times give"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(log), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// A CUDA probe's kernels made with known efficiencies on dgx-h100 (989.4 TFLOP/s BF16 at
// 700 W, 2.903 TB/s measured HBM): calibrate recovers them.
TEST(CalibrateCommand, ProbeKernelsGiveGemmAndElementwiseEfficiency) {
  nlohmann::json kernels = nlohmann::json::array();
  for (int n : {2048, 4096, 8192}) {
    const double flops = 2.0 * n * n * static_cast<double>(n);
    kernels.push_back(
        {{"kind", "gemm"}, {"m", n}, {"n", n}, {"k", n}, {"seconds", flops / (0.62 * 9.894e14)}});
  }
  for (double bytes : {67108864.0, 1073741824.0}) {
    kernels.push_back({{"kind", "copy"}, {"bytes", bytes}, {"seconds", bytes / (0.85 * 2.903e12)}});
  }
  const nlohmann::json probe = {{"probe_version", 1},
                                {"backend", "cuda"},
                                {"ranks", 1},
                                {"ranks_per_node", 1},
                                {"collectives", nlohmann::json::array()},
                                {"kernels", kernels}};
  const std::string path = testing::write_temp_file("cuda-probe.json", probe.dump());
  const std::string out = testing::write_temp_file("cuda-probe-cluster.json", "");
  const auto r = run_shardplan({"calibrate", "--probe", path, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  const nlohmann::json cluster = nlohmann::json::parse(in);
  EXPECT_NEAR(cluster.at("compute").at("gemm_efficiency").get<double>(), 0.62, 1e-9);
  EXPECT_NEAR(cluster.at("compute").at("elementwise_efficiency").get<double>(), 0.85, 1e-9);
  EXPECT_NE(cluster.at("sources").at("compute.gemm_efficiency").get<std::string>().find(path),
            std::string::npos);
  EXPECT_NE(r.out.find("compute.gemm_efficiency"), std::string::npos) << r.out;

  nlohmann::json bad = probe;
  bad["kernels"][0]["kind"] = "conv";
  const std::string bad_path = testing::write_temp_file("cuda-probe-bad.json", bad.dump());
  const auto e = run_shardplan({"calibrate", "--probe", bad_path});
  EXPECT_NE(e.exit_code, 0);
  EXPECT_NE(e.err.find("/kernels/0/kind"), std::string::npos) << e.err;
}

TEST(CalibrateCommand, CudaProbeWithoutADeviceIsAClearError) {
  const auto r = run_shardplan({"probe", "--backend", "cuda"});
  if (r.exit_code == 0) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_NE(r.err.find("--backend cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// The NCCL kernels of a real profiler trace (HolisticTraceAnalysis' nccl_data: DDP
// ResNet-50 on 2 A100s, five fp32 all-reduce buckets of 8–31 MB per step, three steps).
TEST(CalibrateCommand, ProfilerTraceCollectivesAreSamples) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string trace = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/nccl_data.json.gz";
  const auto r = run_shardplan({"calibrate", "--cluster", "dgx-a100", "--trace", trace, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  const nlohmann::json& check = report.at("checks").at(0);
  EXPECT_EQ(check.at("points"), 15);  // 5 buckets × 3 steps; the broadcasts are not modelled
  EXPECT_LT(check.at("rms_relative_error_after").get<double>(),
            check.at("rms_relative_error_before").get<double>());
  const auto none = run_shardplan({"calibrate", "--trace", kLogs + "all_gather_ring.out"});
  EXPECT_NE(none.exit_code, 0);
}

}  // namespace
}  // namespace shardplan
