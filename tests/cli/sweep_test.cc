// End-to-end tests of `shardplan sweep`: the ranking, determinism across thread counts,
// the emitted config, the CSV, the advice when nothing fits, and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json sweep_json(std::vector<std::string> args) {
  args.insert(args.begin(), "sweep");
  args.push_back("--json");
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return stdout_json(r);
}

TEST(SweepCommand, RanksWhatFitsAndIsTheSameOnAnyThreadCount) {
  nlohmann::json one = sweep_json({"--model", "tiny", "--gpus", "4", "-j", "1"});
  nlohmann::json four = sweep_json({"--model", "tiny", "--gpus", "4", "-j", "4"});
  ASSERT_GT(one["fitting"].get<int>(), 0);
  const int64_t cap = one["memory_cap_bytes"];
  double previous = 0;
  for (const auto& p : one["ranking"]) {
    EXPECT_LE(p["peak_reserved_bytes"].get<int64_t>(), cap);
    EXPECT_GE(p["step_seconds"].get<double>(), previous);
    previous = p["step_seconds"];
  }
  EXPECT_EQ(one["configurations"].get<int>(),
            one["evaluated"].get<int>() + one["pruned"].get<int>() + one["invalid"].get<int>());
  one.erase("seconds");
  four.erase("seconds");
  EXPECT_EQ(one, four);
}

TEST(SweepCommand, EmittedConfigPlansAndSimulatesUnchanged) {
  const std::string best = write_temp_file("best.json", "");
  std::filesystem::remove(best);
  const nlohmann::json j = sweep_json({"--model", "tiny", "--gpus", "4", "--emit-config", best});
  ASSERT_TRUE(std::filesystem::exists(best));
  const CommandResult plan =
      run_shardplan({"plan", "--model", "tiny", "--gpus", "4", "--config", best, "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const CommandResult sim =
      run_shardplan({"simulate", "--model", "tiny", "--gpus", "4", "--config", best, "--json"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_DOUBLE_EQ(stdout_json(sim)["summary"]["step_seconds"].get<double>(),
                   j["ranking"][0]["step_seconds"].get<double>());
}

// The text table alone does not compute the front (it says so); --pareto does, as --csv,
// --report and --json do.
TEST(SweepCommand, TheFrontIsComputedWhereItIsShown) {
  const std::vector<std::string> args = {"sweep", "--model",     "tiny",     "--gpus",
                                         "4",     "--recompute", "none,full"};
  const CommandResult text = run_shardplan(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Pareto front (peak memory vs step time): not computed"));
  std::vector<std::string> with = args;
  with.push_back("--pareto");
  const CommandResult front = run_shardplan(with);
  ASSERT_EQ(front.exit_code, 0) << front.err;
  EXPECT_THAT(front.out, ::testing::ContainsRegex(
                             "Pareto front \\(peak memory vs step time\\): [0-9]+ points"));
  EXPECT_FALSE(
      sweep_json({"--model", "tiny", "--gpus", "4", "--recompute", "none,full"})["pareto"].empty());
}

TEST(SweepCommand, TextTableCsvAndReport) {
  const std::string csv = write_temp_file("sweep.csv", "");
  const std::string html = write_temp_file("sweep.html", "");
  const CommandResult r = run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--recompute",
                                         "none,full", "--csv", csv, "--report", html});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rank"));
  EXPECT_THAT(r.out, HasSubstr("Why #1 wins over #2"));
  EXPECT_THAT(r.out, HasSubstr("Pareto front"));
  EXPECT_TRUE(r.err.empty()) << "no progress bar when stderr is not a terminal: " << r.err;
  const std::string table = read_text(csv);
  EXPECT_THAT(table, HasSubstr("index,label,sharding_strategy"));
  const auto lines = std::count(table.begin(), table.end(), '\n');
  const nlohmann::json j =
      sweep_json({"--model", "tiny", "--gpus", "4", "--recompute", "none,full"});
  EXPECT_EQ(lines, j["configurations"].get<int64_t>() + 1);
  for (const auto& p : j["points"]) {
    if (p["state"] == "evaluated") {
      EXPECT_NE(p["config"]["recompute"], "selective") << "--recompute replaced the list";
    }
  }
  const std::string page = read_text(html);
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("memory cap"));
  EXPECT_THAT(page, HasSubstr("Pareto"));
}

// FP8 is tried only when asked for: without --fp8 no point runs it, with it both
// precisions are ranked (the tiny model on an H100 node).
TEST(SweepCommand, Fp8OnlyWhenAsked) {
  auto fp8_points = [](const nlohmann::json& j) {
    int64_t with = 0, without = 0;
    for (const auto& p : j["points"]) {
      if (p["state"] == "invalid") continue;
      (p["label"].get<std::string>().find(" fp8") != std::string::npos ? with : without) += 1;
    }
    return std::pair{with, without};
  };
  const auto plain = fp8_points(sweep_json({"--model", "tiny", "--gpus", "4"}));
  EXPECT_EQ(plain.first, 0);
  EXPECT_GT(plain.second, 0);
  const auto asked = fp8_points(sweep_json({"--model", "tiny", "--gpus", "4", "--fp8"}));
  EXPECT_GT(asked.first, 0);
  EXPECT_EQ(asked.second, plain.second);
}

// Under mpirun the ranks split each batch of simulations; rank 0 alone reports, and what
// it reports is what one process finds (the time taken aside).
TEST(SweepCommand, UnderMpirunRankZeroReportsWhatOneProcessFinds) {
  const std::vector<std::string> args = {"sweep", "--model", "tiny", "--gpus", "16",
                                         "--top", "3",       "-j",   "1",      "--json"};
  const CommandResult one = run_shardplan(args);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  std::vector<std::string> argv = {"--allow-run-as-root", "--oversubscribe", "-np", "3",
                                   SHARDPLAN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult three = run_program("mpirun", argv);
  ASSERT_EQ(three.exit_code, 0) << three.err;
  nlohmann::json a = stdout_json(one), b = stdout_json(three);
  EXPECT_GT(a["pruned_by_time"].get<int64_t>(), 0);  // the batches mattered
  EXPECT_GT(a["evaluated"].get<int64_t>(), 16);      // more than one batch
  a.erase("seconds");
  b.erase("seconds");
  EXPECT_EQ(a, b);

  argv.pop_back();  // --json: the text report, printed once
  const CommandResult text = run_program("mpirun", argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("on 3 MPI ranks × 1 thread."));
  EXPECT_EQ(text.out.find("Sweep:"), text.out.rfind("Sweep:"));
}

TEST(SweepCommand, NothingFitsNamesTheSmallestChange) {
  const CommandResult r =
      run_shardplan({"sweep", "--model", "llama3-8b", "--gpus", "8", "--mem-cap", "12GiB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Nothing fits under the 12.00 GiB cap"));
  EXPECT_THAT(r.out, HasSubstr("full mb1×"));  // the leanest: full recompute, micro-batch 1
  EXPECT_THAT(r.out, HasSubstr(" fits on "));
}

TEST(SweepCommand, BadInputIsAClearError) {
  CommandResult r = run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--dp-outer", "3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("3 does not divide the 4 GPUs"));
  r = run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--mem-cap", "lots"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--mem-cap"));
  r = run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--strategies", "zero9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown sharding strategy 'zero9'"));
  const std::string space =
      write_temp_file("space.json", R"({"prefetch": [1], "recompute": "full"})");
  r = run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--space", space});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("space.json"));
  EXPECT_THAT(r.err, HasSubstr("/recompute"));
}

}  // namespace
}  // namespace shardplan::testing

namespace shardplan::testing {
namespace {

TEST(SweepCommand, FlagErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-j", "-1"}, "--jobs: must not be negative"},
      {{"--top", "0"}, "--top: must be positive"},
      {{"--global-batch", "8", "--global-batch-tokens", "8192"}, "--global-batch-tokens"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"sweep", "--model", "tiny", "--gpus", "4"};
    args.insert(args.end(), flags.begin(), flags.end());
    const CommandResult r = run_shardplan(args);
    EXPECT_EQ(r.exit_code, 1) << message;
    EXPECT_THAT(r.err, ::testing::HasSubstr(message));
  }
}

TEST(ExecuteCommand, FlagErrorsNameTheFlag) {
  const std::string plan = write_temp_file("flags_plan.json", "");
  ASSERT_EQ(run_shardplan({"plan", "--model", "tiny", "--gpus", "1", "-o", plan}).exit_code, 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--backend", "tpu"}, "--backend: expected cpu or cuda, got 'tpu'"},
      {{"--steps", "0"}, "--steps: must be positive"},
      {{"--warmup", "-1"}, "--warmup: must not be negative"},
      {{"--compute-scale", "2"}, "--compute-scale: must be in (0, 1]"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"execute", "--plan", plan};
    args.insert(args.end(), flags.begin(), flags.end());
    const CommandResult r = run_shardplan(args);
    EXPECT_EQ(r.exit_code, 1) << message;
    EXPECT_THAT(r.err, ::testing::HasSubstr(message));
  }
}

}  // namespace
}  // namespace shardplan::testing
