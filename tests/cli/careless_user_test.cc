// What a careless user types, end to end through the binary: outputs that would destroy
// a device node or collide, inputs that are directories or endless, numbers past a flag's
// type, a sweep whose points are invalid for a reason it must name, and errors under
// mpirun printed once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

fs::path fresh_folder(const std::string& name) {
  const fs::path folder =
      fs::temp_directory_path() / ("shardplan_careless_" + std::to_string(::getpid()) + name);
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

// One line, "shardplan: error: ...", exit 1.
void expect_one_error_line(const CommandResult& r, const std::string& text) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("shardplan: error: "));
  EXPECT_THAT(r.err, HasSubstr(text));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CarelessOutput, ADeviceNodeStaysADevice) {
  const fs::path folder = fresh_folder("device");
  const fs::path null = folder / "null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs CAP_MKNOD";
  }
  const CommandResult r =
      run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", null.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  struct stat info {};
  ASSERT_EQ(::lstat(null.c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "plan -o replaced the device node with a file";
  fs::remove_all(folder);
}

TEST(CarelessOutput, PlanIntoStdoutIsThePlan) {
  const CommandResult r =
      run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "--json", "-o", "/dev/stderr"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.err).at("num_gpus"), 2);
}

// -o /dev/stdout writes through the descriptor the shell opened: `>>` appends, and `>`
// gets the JSON in order with the text printed after it (it was reopened with O_TRUNC,
// which emptied a log and let the table overwrite the JSON).
TEST(CarelessOutput, StdoutRedirectedToAFileKeepsWhatItHeldAndTheOrder) {
  const fs::path folder = fresh_folder("stdout");
  const std::string log = (folder / "log.txt").string();
  { std::ofstream(log) << "earlier line\n"; }
  const std::string command =
      std::string(SHARDPLAN_BINARY) + " plan --model tiny --gpus 2 --json -o /dev/stdout >> " + log;
  ASSERT_EQ(run_program("sh", {"-c", command}).exit_code, 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(text.starts_with("earlier line\n{")) << text.substr(0, 200);
  // The plan, then the --json summary, each whole.
  const std::size_t plan_end = text.find("\n}\n") + 3;
  EXPECT_EQ(nlohmann::json::parse(text.substr(13, plan_end - 13)).at("num_gpus"), 2);
  EXPECT_TRUE(nlohmann::json::parse(text.substr(plan_end)).contains("memory"));
  fs::remove_all(folder);
}

TEST(CarelessOutput, ADirectoryIsRefused) {
  const fs::path folder = fresh_folder("dir_out");
  expect_one_error_line(
      run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", folder.string()}),
      "is a directory; give a file name to write");
  EXPECT_TRUE(fs::is_directory(folder));
  fs::remove_all(folder);
}

TEST(CarelessOutput, TwoOutputsOnOnePathAreRefusedBeforeAnyWork) {
  const fs::path folder = fresh_folder("collide");
  const std::string out = (folder / "x").string();
  expect_one_error_line(run_shardplan({"simulate", "--model", "tiny", "--gpus", "2",
                                       "--timeline-out", out, "--trace-out", out, "--report", out}),
                        "--timeline-out: writes to the same file as --trace-out");
  expect_one_error_line(
      run_shardplan({"sweep", "--model", "tiny", "--gpus", "2", "--csv", out, "--report", out}),
      "--report: writes to the same file as --csv");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(folder);
}

TEST(CarelessInput, ADirectoryOrAnEndlessDeviceIsRefused) {
  const fs::path folder = fresh_folder("dir_in");
  expect_one_error_line(run_shardplan({"describe", "--model", folder.string()}),
                        "is a directory, not a file");
  expect_one_error_line(run_shardplan({"simulate", "--plan", "/dev/zero"}),
                        "/dev/zero: the input is larger than the");
  expect_one_error_line(run_shardplan({"describe", "--cluster", "/dev/zero"}),
                        "/dev/zero: the input is larger than the");
  expect_one_error_line(run_shardplan({"pack", "--input", "/dev/zero"}),
                        "/dev/zero: the input is larger than the");
  fs::remove_all(folder);
}

TEST(CarelessInput, AKeyGivenTwiceIsRefused) {
  const std::string config = write_temp_file("twice.json", R"({"tp": 1, "tp": 2})");
  expect_one_error_line(
      run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "--config", config}),
      "the key 'tp' appears twice");
}

TEST(CarelessFlags, ANumberPastTheFlagsTypeIsSaidPlainly) {
  const CommandResult r = run_shardplan({"sweep", "--model", "tiny", "--jobs", "2147483648"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--jobs: '2147483648' is not a value it takes"));
  EXPECT_THAT(r.err, Not(HasSubstr("Could not convert")));
}

TEST(CarelessFlags, RawBytesAreNotEchoed) {
  const CommandResult r = run_shardplan({"describe", "--model", "llama\x1b[2J\x07"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, Not(HasSubstr("\x1b")));
  EXPECT_THAT(r.err, HasSubstr("\\x1B[2J\\x07"));
}

TEST(CarelessSweep, AMeshThatDoesNotTileIsBlamedNotTheBatch) {
  const std::string space = write_temp_file("tp3.json", R"({"tp": [3]})");
  const CommandResult r =
      run_shardplan({"sweep", "--model", "llama3-8b", "--gpus", "8", "--space", space});
  expect_one_error_line(r, "tp × cp = 3 × 1 = 3 does not divide the 8 GPUs");
  EXPECT_THAT(r.err, HasSubstr("(zero1 ?×1 tp3"));
  EXPECT_THAT(r.err, Not(HasSubstr("micro_batch")));
}

TEST(CarelessSweep, ABatchThatDoesNotSplitSaysOverHowManyRanks) {
  expect_one_error_line(run_shardplan({"sweep", "--model", "llama3-8b", "--gpus", "8",
                                       "--global-batch", "12", "--micro-batch", "5"}),
                        "the global batch does not split into whole micro-batches of 5 "
                        "sequences over the 8 data-parallel ranks");
}

TEST(CarelessSweep, GlobalBatchErrorsNameTheFlag) {
  expect_one_error_line(run_shardplan({"sweep", "--model", "llama3-8b", "--gpus", "8",
                                       "--global-batch", "9223372036854775807"}),
                        "--global-batch: must be in [1, 1099511627776]");
  // 100 000 tokens are not whole 8192-token sequences: no longer rounded silently.
  expect_one_error_line(run_shardplan({"sweep", "--model", "llama3-8b", "--gpus", "8",
                                       "--global-batch-tokens", "100000"}),
                        "--global-batch-tokens: 100000 tokens is not a whole number of "
                        "8192-token sequences");
}

// A config no one trains with predicts a step longer than a timeline may hold: printed,
// but not written as a timeline compare would refuse.
TEST(CarelessOutput, AStepLongerThanADayIsNotWrittenAsATimeline) {
  const std::string out = write_temp_file("day.json", "old");
  const std::vector<std::string> job = {"simulate", "--model", "llama3.1-405b",
                                        "--gpus",   "1",       "--cluster",
                                        "dgx-a100", "--set",   "grad_accum=1500"};
  std::vector<std::string> with_output = job;
  with_output.insert(with_output.end(), {"--timeline-out", out});
  const CommandResult refused = run_shardplan(with_output);
  expect_one_error_line(refused, "--timeline-out: the predicted step lasts ");
  EXPECT_THAT(refused.err, HasSubstr("e+05 s, longer than the day"));
  std::ifstream in(out);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "old");
  std::vector<std::string> json = job;
  json.push_back("--json");
  const CommandResult r = run_shardplan(json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(stdout_json(r)["summary"]["step_seconds"].get<double>(), 86400.0);
}

// A file name need not be UTF-8; --json output must be, and says U+FFFD for what is not.
TEST(CarelessInput, AFileNameThatIsNotUtf8KeepsTheJsonValid) {
  const fs::path folder = fresh_folder("utf8");
  const std::string plan = (folder / "plan.json").string();
  ASSERT_EQ(run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", plan}).exit_code, 0);
  const std::string odd = (folder / "caf\xff.json").string();
  fs::copy_file(plan, odd);
  const CommandResult r = run_shardplan({"pack", "--input", odd, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(stdout_json(r)["buffers"].is_number(), true);
  EXPECT_THAT(r.out, HasSubstr("caf\xEF\xBF\xBD.json"));
  fs::remove_all(folder);
}

// One word that is neither a command line nor a file says both.
TEST(CarelessInput, FromMegatronWithOneWordThatIsNoFile) {
  expect_one_error_line(
      run_shardplan({"plan", "--from-megatron", std::string(300, 'x')}),
      "--from-megatron: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…' (300 "
      "bytes) "
      "is neither a command line (it has no --flag) nor a file that can be read (cannot open "
      "file: File name too long)");
}

// Every rank reads the same bad input: rank 0 alone says so.
TEST(CarelessMpi, AnInputErrorIsPrintedOnceUnderMpirun) {
  const CommandResult r = run_program(
      "timeout", {"-s", "KILL", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                  "3", SHARDPLAN_BINARY, "plan", "--model", "no-such-model"});
  EXPECT_NE(r.exit_code, 0);
  const std::string needle = "unknown model 'no-such-model'";
  std::size_t count = 0;
  for (std::size_t at = r.err.find(needle); at != std::string::npos;
       at = r.err.find(needle, at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << r.err;
}

}  // namespace
}  // namespace shardplan::testing
