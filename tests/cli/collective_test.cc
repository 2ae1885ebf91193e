// End-to-end tests of `shardplan collective`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

TEST(CollectiveCommand, OneSizeMatchesTheHandWorkedRing) {
  const CommandResult r =
      run_shardplan({"collective", "--op", "all_gather", "--bytes", "1GiB", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["ranks"], 8);
  EXPECT_EQ(j["nodes"], 1);
  const nlohmann::json& row = j["results"][0];
  const double bytes = 1073741824.0;
  EXPECT_EQ(row["bytes"].get<double>(), bytes);
  EXPECT_NEAR(row["seconds"].get<double>(), (8.4 + 7 * 3.4) * 1e-6 + bytes * 7 / 8 / 360e9, 1e-12);
  EXPECT_EQ(row["algorithm"], "ring");
  EXPECT_EQ(row["protocol"], "Simple");
  EXPECT_NEAR(row["busbw_bytes_per_s"].get<double>(),
              row["algbw_bytes_per_s"].get<double>() * 7 / 8, 1.0);
}

TEST(CollectiveCommand, SweepCoversOneKibToEightGib) {
  const CommandResult r = run_shardplan(
      {"collective", "--op", "all_reduce", "--nodes", "2", "--ranks", "16", "--sweep", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  ASSERT_EQ(j["results"].size(), 24u);
  EXPECT_EQ(j["results"].front()["bytes"], 1024.0);
  EXPECT_EQ(j["results"].back()["bytes"], 8.0 * 1073741824.0);
  // Small sizes are latency-bound (tens of microseconds), large ones bandwidth-bound.
  EXPECT_LT(j["results"].front()["seconds"].get<double>(), 100e-6);
  EXPECT_GT(j["results"].front()["seconds"].get<double>(), 5e-6);
  // 8 GiB over 2 full nodes: bound by the node's 8 NICs, capped by NVLink's 360 GB/s.
  EXPECT_NEAR(j["results"].back()["busbw_bytes_per_s"].get<double>() / 360e9, 1.0, 0.02);
}

TEST(CollectiveCommand, SizeUnits) {
  const auto seconds = [](const std::string& size) {
    const CommandResult r =
        run_shardplan({"collective", "--op", "reduce_scatter", "--bytes", size, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return stdout_json(r)["results"][0]["bytes"].get<double>();
  };
  EXPECT_EQ(seconds("64K"), 65536.0);
  EXPECT_EQ(seconds("64KiB"), 65536.0);
  EXPECT_EQ(seconds("64KB"), 64000.0);
  EXPECT_EQ(seconds("2G"), 2147483648.0);
  EXPECT_EQ(seconds("4096"), 4096.0);
}

struct BadCollective {
  const char* name;
  std::vector<std::string> args;
  const char* expected;
};

class CollectiveRejects : public ::testing::TestWithParam<BadCollective> {};

TEST_P(CollectiveRejects, ExitsOne) {
  std::vector<std::string> args = {"collective"};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(GetParam().expected));
  EXPECT_TRUE(r.out.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Collective, CollectiveRejects,
    ::testing::Values(
        BadCollective{
            "op", {"--op", "broadcast", "--bytes", "1K"}, "unknown collective 'broadcast'"},
        BadCollective{
            "unit", {"--op", "all_reduce", "--bytes", "3 parsecs"}, "--bytes: unknown unit"},
        BadCollective{"size", {"--op", "all_reduce", "--bytes", "-5"}, "--bytes: must be positive"},
        BadCollective{"missing_size", {"--op", "all_reduce"}, "--bytes: give a size, or --sweep"},
        BadCollective{"too_many_ranks",
                      {"--op", "all_reduce", "--bytes", "1K", "--ranks", "9"},
                      "9 ranks exceed the 8 GPUs"},
        BadCollective{"cluster",
                      {"--op", "all_reduce", "--bytes", "1K", "--cluster", "dgx-h1000"},
                      "did you mean 'dgx-h100'"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

}  // namespace
}  // namespace shardplan::testing
