// Under mpirun, a rank that dies or hangs ends the whole job with a clear error within a
// bounded time, and a rank that cannot get its memory says so; never a hang. Each job
// runs under `timeout -s KILL 120`, so a hang fails the test instead of the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "executor/watchdog.h"
#include "models/limits.h"
#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kHung = 120;  // seconds: the job was killed by timeout(1)

std::string tiny_plan(const std::string& name) {
  const std::string path = write_temp_file(name, "");
  const CommandResult r = run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

// A launcher script: rank 1 gets `signal` one second into the run; other ranks run as is.
std::string rank_one_gets(const std::string& signal) {
  const std::string path = write_temp_file("rank1_" + signal + ".sh",
                                           "#!/bin/sh\n"
                                           "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
                                           "  (sleep 1; kill -" +
                                               signal +
                                               " $$) &\n"
                                               "fi\n"
                                               "exec \"" SHARDPLAN_BINARY "\" \"$@\"\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

struct Timed {
  CommandResult result;
  double seconds = 0;
};

Timed mpirun_bounded(const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"-s",
                                   "KILL",
                                   std::to_string(static_cast<int>(kHung)),
                                   "mpirun",
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "-np",
                                   "2",
                                   program};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto start = std::chrono::steady_clock::now();
  Timed t{.result = run_program("timeout", argv)};
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return t;
}

TEST(JobFailure, AHungRankEndsTheJobAfterTheTimeout) {
  const std::string plan = tiny_plan("hung_plan.json");
  // SIGSTOP: rank 1 is alive but never reaches its next collective, as a hung GPU would.
  const Timed t = mpirun_bounded(
      rank_one_gets("STOP"), {"execute", "--plan", plan, "--steps", "1000000", "--timeout", "3"});
  ASSERT_LT(t.seconds, kHung / 2) << "the job hung";
  EXPECT_NE(t.result.exit_code, 0);
  EXPECT_THAT(t.result.err, HasSubstr("rank 0 of 2: no progress for"));
  EXPECT_THAT(t.result.err, HasSubstr("another rank died or hangs"));
}

// Rank 1 stops before it starts: rank 0 waits in MPI_Init, Open MPI's fence over every
// rank, which no replay watchdog covers (it hung until timeout(1) killed the job).
TEST(JobFailure, ARankThatNeverStartsEndsTheJob) {
  const std::string plan = tiny_plan("never_plan.json");
  const std::string launcher = write_temp_file("rank1_never.sh",
                                               "#!/bin/sh\n"
                                               "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
                                               "  kill -STOP $$\n"
                                               "fi\n"
                                               "exec \"" SHARDPLAN_BINARY "\" \"$@\"\n");
  ::chmod(launcher.c_str(), 0755);
  const Timed t = mpirun_bounded(launcher, {"execute", "--plan", plan, "--timeout", "3"});
  ASSERT_LT(t.seconds, kHung / 2) << "the job hung";
  EXPECT_NE(t.result.exit_code, 0);
  EXPECT_THAT(t.result.err, HasSubstr("rank 0 of 2: no progress for"));
  EXPECT_THAT(t.result.err, HasSubstr("MPI's start (MPI_Init)"));
  EXPECT_THAT(t.result.err, HasSubstr("another rank died or hangs"));
}

TEST(JobFailure, ADeadRankEndsTheJob) {
  const std::string plan = tiny_plan("dead_plan.json");
  const Timed t =
      mpirun_bounded(rank_one_gets("KILL"), {"execute", "--plan", plan, "--steps", "1000000"});
  ASSERT_LT(t.seconds, kHung / 2) << "the job hung";
  EXPECT_NE(t.result.exit_code, 0);
  // mpirun's own report names the rank and the signal.
  EXPECT_THAT(t.result.err, HasSubstr("rank 1")) << t.result.err;
  EXPECT_THAT(t.result.err, HasSubstr("signal 9")) << t.result.err;
}

TEST(JobFailure, APoolNoRankCanAllocateIsAnErrorNamingIt) {
  // With overcommit always on (vm.overcommit_memory 1) the kernel grants any address
  // space and only touching it fails.
  int overcommit = 0;
  std::ifstream("/proc/sys/vm/overcommit_memory") >> overcommit;
  if (overcommit == 1) GTEST_SKIP() << "vm.overcommit_memory is 1";
  const std::string plan = tiny_plan("huge_pool_plan.json");
  nlohmann::json j;
  std::ifstream(plan) >> j;
  // What a rank holds grown to 16 TiB, the most one GPU's memory may be (limits.h):
  // still a valid plan, but more than a host has.
  int64_t others = j["non_tensor_bytes"].get<int64_t>();
  for (const auto& b : j["buffers"])
    if (b["persistent"].get<bool>()) others += b["bytes"].get<int64_t>();
  const int64_t pool = limits::kMaxGpuMemoryBytes - others;
  j["pool"]["size_bytes"] = pool;
  const std::string huge = write_temp_file("huge_pool.json", j.dump());
  const Timed t = mpirun_bounded(SHARDPLAN_BINARY, {"execute", "--plan", huge, "--steps", "1"});
  EXPECT_EQ(t.result.exit_code, 1) << t.result.err;
  EXPECT_THAT(t.result.err, HasSubstr("/pool/size_bytes: rank "));
  EXPECT_THAT(t.result.err, HasSubstr("cannot allocate " + std::to_string(pool) + " bytes"));
}

// A plan one rank cannot read (missing on its node) is said by that rank, and the job ends
// at once: the ranks agree before any waits for another (it hung until the watchdog, and
// the parser's file check ended the rank without a word).
TEST(JobFailure, APlanOneRankCannotReadIsSaidByThatRank) {
  const std::string plan = tiny_plan("one_rank_plan.json");
  const std::string launcher =
      write_temp_file("rank1_missing.sh",
                      "#!/bin/sh\n"
                      "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
                      "  exec \"" SHARDPLAN_BINARY
                      "\" execute --plan /nonexistent/plan.json\n"
                      "fi\n"
                      "exec \"" SHARDPLAN_BINARY "\" execute --plan \"$1\"\n");
  ::chmod(launcher.c_str(), 0755);
  const Timed t = mpirun_bounded(launcher, {plan});
  EXPECT_NE(t.result.exit_code, 0);
  EXPECT_LT(t.seconds, kHung / 2) << "the job waited for the rank that stopped";
  EXPECT_THAT(t.result.err, HasSubstr("shardplan: error (rank 1): /nonexistent/plan.json: cannot "
                                      "open file"));
}

TEST(JobFailure, TheTimeoutMustBePositive) {
  const std::string plan = tiny_plan("timeout_plan.json");
  const CommandResult r = run_shardplan({"execute", "--plan", plan, "--timeout", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--timeout: must be in (0, 604800] seconds"));
}

TEST(Watchdog, EndsTheProcessWithoutProgress) {
  EXPECT_EXIT(
      {
        Watchdog w(0.2, "rank 3 of 4", [](int step, int64_t op) {
          return "step " + std::to_string(step) + " op " + std::to_string(op);
        });
        w.progress(2, 17);
        ::pause();
      },
      ::testing::ExitedWithCode(Watchdog::kTimedOutExitCode),
      "rank 3 of 4: no progress for 0\\.[2-9] s while running step 2 op 17");
}

TEST(Watchdog, ProgressKeepsItQuiet) {
  EXPECT_EXIT(
      {
        Watchdog w(1.0, "rank 0 of 1", [](int, int64_t) { return std::string("op"); });
        for (int i = 0; i < 200; ++i) {
          w.progress(0, i);
          ::usleep(10'000);  // 2 s in all: twice the timeout
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace shardplan::testing
