// `shardplan probe --backend cpu` under mpirun: every collective at every size, a file
// calibrate reads, and a clear error without ranks to measure between.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

TEST(Probe, MeasuresEveryCollectiveAndCalibrateReadsIt) {
  const std::string probe = write_temp_file("probe.json", "");
  const CommandResult r =
      run_program("mpirun", {"--allow-run-as-root", "--oversubscribe", "-np", "4", SHARDPLAN_BINARY,
                             "probe", "--max-bytes", "64K", "--iterations", "3", "-o", probe});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(probe);
  const nlohmann::json p = nlohmann::json::parse(in);
  EXPECT_EQ(p.at("probe_version"), 1);
  EXPECT_EQ(p.at("ranks"), 4);
  const nlohmann::json& tables = p.at("collectives");
  ASSERT_EQ(tables.size(), 5u);  // one host: the world group only
  for (const auto& t : tables) {
    EXPECT_EQ(t.at("ranks"), 4);
    ASSERT_EQ(t.at("rows").size(), 7u) << t.at("op");  // 1, 2, ..., 64 KiB
    EXPECT_EQ(t.at("rows").at(0).at("bytes"), 1024.0);
    for (const auto& row : t.at("rows")) EXPECT_GT(row.at("seconds").get<double>(), 0);
  }
  // The CPU backend's collectives go through shared memory on an oversubscribed host:
  // tens of MB/s under load, 10^4 below NVLink, where calibrate rightly refuses the scale
  // as another network's log. Calibrate a cluster whose node link is about that slow
  // (the slowest link the bounds allow, 100 MB/s) so the fitted scales stay in range.
  const std::string slow_cluster = write_temp_file("cpu-host-cluster.json", [&] {
    std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/models/clusters/dgx-h100.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["name"] = "cpu-host";
    j["intra_node"]["bandwidth_bytes_per_s"] = 1e8;
    j["intra_node"]["measured_bus_bandwidth_bytes_per_s"] = 1e8;
    // ... and whose latencies are a host's: 100 µs per hop and per launch (a loaded
    // host's small collectives took milliseconds, 10^3 above NVLink's microseconds).
    j["intra_node"]["latency_s"] = 1e-4;
    j["nccl"]["base_latency_s"] = 1e-4;
    return j.dump();
  }());
  const std::string out = write_temp_file("probe-cluster.json", "");
  const CommandResult c = run_shardplan(
      {"calibrate", "--cluster", slow_cluster, "--probe", probe, "-o", out, "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.out);
  const nlohmann::json& check = report.at("checks").at(0);
  EXPECT_EQ(check.at("points"), 5 * 7);
  EXPECT_LT(check.at("rms_relative_error_after").get<double>(),
            check.at("rms_relative_error_before").get<double>());
  EXPECT_EQ(run_shardplan({"collective", "--cluster", out, "--op", "all_reduce", "--bytes", "1M"})
                .exit_code,
            0);
}

TEST(Probe, NeedsRanksToMeasureBetween) {
  const CommandResult r = run_shardplan({"probe"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("mpirun -np N"), std::string::npos) << r.err;
  const CommandResult bad = run_shardplan({"probe", "--backend", "tpu"});
  EXPECT_NE(bad.exit_code, 0);
  // MPI counts are ints: a CPU probe stops at 1 GiB.
  const CommandResult big = run_shardplan({"probe", "--max-bytes", "2GiB"});
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("--max-bytes"), std::string::npos) << big.err;
}

}  // namespace
}  // namespace shardplan::testing
