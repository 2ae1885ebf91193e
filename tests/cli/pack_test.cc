// End-to-end tests of `shardplan pack`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

const std::string kExample =
    std::string(SHARDPLAN_SHARED_DIR) + "/benchmarks/minimalloc/examples/input.12.csv";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PackCommand, ReadmeExampleEveryAlgorithm) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  for (const char* algorithm : {"slots", "best-fit", "exact", "auto"}) {
    const CommandResult r = run_shardplan(
        {"pack", "--input", kExample, "--alignment", "1", "--algorithm", algorithm, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = stdout_json(r);
    EXPECT_EQ(j["status"], "solved");
    EXPECT_EQ(j["lower_bound"], 12);
    EXPECT_EQ(j["buffers"], 5);
    if (std::string(algorithm) != "slots") {
      EXPECT_EQ(j["height"], 12) << algorithm;
      EXPECT_EQ(j["proven_optimal"], true) << algorithm;
    }
    EXPECT_GE(j["height"].get<int64_t>(), 12);
  }
}

TEST(PackCommand, WritesOffsetsThatMatchTheHeight) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string out = write_temp_file("packed.csv", "");
  const CommandResult r =
      run_shardplan({"pack", "--input", kExample, "--alignment", "1", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = slurp(out);
  EXPECT_THAT(text, ::testing::StartsWith("id,lower,upper,size,offset\n"));
  // Re-reading the output as input (its offset column is ignored) packs to the same height.
  const CommandResult again = run_shardplan({"pack", "--input", out, "--alignment", "1", "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(stdout_json(again)["height"], 12);
}

TEST(PackCommand, InfeasibleCapacityIsAResultNotAnError) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string out = write_temp_file("never.csv", "");
  std::filesystem::remove(out);
  const CommandResult r = run_shardplan(
      {"pack", "--input", kExample, "--alignment", "1", "--capacity", "11", "-o", out, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(stdout_json(r)["status"], "infeasible");
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing is written without a placement";
}

TEST(PackCommand, RepacksAPlan) {
  const std::string plan = write_temp_file("plan_in.json", "");
  const std::string repacked = write_temp_file("plan_out.json", "");
  ASSERT_EQ(run_shardplan({"plan", "--model", "mixtral-8x7b", "--nodes", "2", "--set",
                           "seq_len=4096", "--set", "grad_accum=2", "-o", plan})
                .exit_code,
            0);
  const CommandResult r =
      run_shardplan({"pack", "--input", plan, "--algorithm", "best-fit", "-o", repacked, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_GE(j["height"].get<int64_t>(), j["lower_bound"].get<int64_t>());
  const nlohmann::json out = nlohmann::json::parse(slurp(repacked));
  EXPECT_EQ(out["pool"]["algorithm"], "best-fit");
  EXPECT_EQ(out["pool"]["size_bytes"], j["height"]);
}

TEST(PackCommand, RefusesAnInconsistentPlan) {
  const std::string plan = write_temp_file("broken_plan.json", "");
  ASSERT_EQ(run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", plan}).exit_code, 0);
  nlohmann::json j = nlohmann::json::parse(slurp(plan));
  // Put a transient buffer past the end of the pool.
  for (auto& b : j["buffers"]) {
    if (!b["persistent"].get<bool>()) {
      b["offset"] = j["pool"]["size_bytes"];
      break;
    }
  }
  const std::string broken = write_temp_file("broken_plan2.json", j.dump());
  const CommandResult r = run_shardplan({"pack", "--input", broken});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(broken + ": outside_pool: invalid plan:"));
}

TEST(PackCommand, RejectsANonPositiveTimeLimit) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const CommandResult r = run_shardplan({"pack", "--input", kExample, "--time-limit", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("--time-limit: must be positive"));
}

struct BadPack {
  const char* name;
  std::string csv;
  std::vector<std::string> extra;
  const char* expected;
};

class PackRejects : public ::testing::TestWithParam<BadPack> {};

TEST_P(PackRejects, ExitsOneNamingTheLine) {
  const BadPack& bad = GetParam();
  const std::string input = write_temp_file(std::string(bad.name) + ".csv", bad.csv);
  const std::string out = write_temp_file(std::string(bad.name) + ".out.csv", "");
  std::filesystem::remove(out);
  std::vector<std::string> args = {"pack", "--input", input, "-o", out};
  args.insert(args.end(), bad.extra.begin(), bad.extra.end());
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(bad.expected));
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
}

INSTANTIATE_TEST_SUITE_P(
    Pack, PackRejects,
    ::testing::Values(
        BadPack{"missing", "id,lower,size\n0,0,1\n", {}, "line 1: missing column 'upper'"},
        BadPack{"nonnumeric",
                "id,lower,upper,size\n0,0,1,x\n",
                {},
                "line 2, column size: expected an integer"},
        BadPack{
            "size", "id,lower,upper,size\n0,0,1,0\n", {}, "line 2, column size: must be positive"},
        BadPack{"order",
                "id,lower,upper,size\n0,4,1,8\n",
                {},
                "line 2, column lower: lower 4 is not below"},
        BadPack{"duplicate",
                "id,lower,upper,size\na,0,1,8\na,1,2,8\n",
                {},
                "line 3, column id: duplicate"},
        BadPack{"algorithm",
                "id,lower,upper,size\na,0,1,8\n",
                {"--algorithm", "greedy"},
                "unknown algorithm 'greedy'"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

}  // namespace
}  // namespace shardplan::testing
