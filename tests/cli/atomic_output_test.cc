// Every file shardplan writes, written by a process the kernel kills in the middle of
// writing it (RLIMIT_FSIZE: SIGXFSZ at the first byte past the limit): the target keeps
// its old content, whole. Without the limit the same command replaces it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan::testing {
namespace {

constexpr char kOldContent[] = "old content, whole\n";
// Below every output.
constexpr int64_t kFileLimitBytes = 96;
// A tiny plan's measured timeline has about 6 KiB.
constexpr int64_t kMpiFileLimitBytes = 4096;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct WriteCase {
  std::string name;
  std::vector<std::string> args;  // "@out" is the target, "@plan" a tiny plan.json
  std::string program = SHARDPLAN_BINARY;
  int64_t file_limit_bytes = kFileLimitBytes;
  // Under mpirun the ranks get the limit ("@ranks_limited" becomes prlimit --fsize), not
  // mpirun: with it, mpirun's own session files can pass the limit, and in a fresh Debian
  // chroot mpirun then never reaped the killed rank and hung. The job runs under
  // `timeout -s KILL 120` (as in job_failure_test), so a hang fails the test.
  bool limit_ranks = false;
};

void PrintTo(const WriteCase& c, std::ostream* os) {
  *os << c.name;
}

std::string tiny_plan() {
  static const std::string path = [] {
    const std::string p = write_temp_file("atomic_tiny_plan.json", "");
    const CommandResult r = run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", p});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

// `limit`: the bytes a rank may write ("@ranks_limited"), or none.
std::vector<std::string> substitute(const std::vector<std::string>& args, const std::string& out,
                                    std::optional<int64_t> limit = std::nullopt) {
  std::vector<std::string> result;
  for (const std::string& a : args) {
    if (a == "@ranks_limited") {
      if (limit) {
        result.push_back("prlimit");
        result.push_back("--fsize=" + std::to_string(*limit));
      }
      continue;
    }
    result.push_back(a == "@out" ? out : a == "@plan" ? tiny_plan() : a);
  }
  return result;
}

class AtomicOutput : public ::testing::TestWithParam<WriteCase> {};

TEST_P(AtomicOutput, AKillMidWriteLeavesTheOldFileWhole) {
  const WriteCase& c = GetParam();
  for (const std::string& a : c.args) {
    if (a.starts_with(SHARDPLAN_SHARED_DIR)) SHARDPLAN_SKIP_WITHOUT_SHARED();
  }
  const std::string out = write_temp_file("atomic_" + c.name + ".out", kOldContent);
  const CommandResult killed =
      c.limit_ranks
          ? run_program(c.program, substitute(c.args, out, c.file_limit_bytes))
          : run_with_file_size_limit(c.program, substitute(c.args, out), c.file_limit_bytes);
  ASSERT_EQ(killed.exit_code, 128 + SIGXFSZ) << "the write was not cut short";
  EXPECT_EQ(read_file(out), kOldContent);

  const CommandResult done = run_program(c.program, substitute(c.args, out));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const std::string written = read_file(out);
  EXPECT_NE(written, kOldContent);
  EXPECT_GT(written.size(), static_cast<std::size_t>(c.file_limit_bytes));
  // Gone once written: only the killed run may leave its temporary file behind, hidden.
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(out).parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.find("atomic_" + c.name + ".out.") != std::string::npos) {
      EXPECT_TRUE(name.starts_with(".") && name.ends_with(".tmp")) << name;
    }
  }
  // The mode a plain open gives (0666 less the umask), not mkstemp's private 0600.
  const auto perms = std::filesystem::status(out).permissions();
  EXPECT_NE(perms & std::filesystem::perms::group_read, std::filesystem::perms::none);
}

const std::string kTrace = SHARDPLAN_SHARED_DIR "/traces-real/nccl_data.json.gz";
const std::string kBuffers =
    SHARDPLAN_SHARED_DIR "/benchmarks/minimalloc/idealloc/somas_tensors/tiny_bert.csv";

INSTANTIATE_TEST_SUITE_P(
    EveryWriter, AtomicOutput,
    ::testing::Values(
        WriteCase{"plan", {"plan", "--model", "tiny", "-o", "@out"}},
        WriteCase{"simulate_timeline", {"simulate", "--model", "tiny", "--timeline-out", "@out"}},
        WriteCase{"simulate_trace", {"simulate", "--model", "tiny", "--trace-out", "@out"}},
        WriteCase{"simulate_report", {"simulate", "--model", "tiny", "--report", "@out"}},
        WriteCase{"sweep_csv", {"sweep", "--model", "tiny", "--prefetch", "1", "--csv", "@out"}},
        WriteCase{"sweep_report",
                  {"sweep", "--model", "tiny", "--prefetch", "1", "--report", "@out"}},
        WriteCase{"sweep_emit_config",
                  {"sweep", "--model", "tiny", "--prefetch", "1", "--emit-config", "@out"}},
        WriteCase{"trace_import_step", {"trace", "import", kTrace, "-o", "@out"}},
        WriteCase{"trace_import_timeline", {"trace", "import", kTrace, "--timeline", "@out"}},
        WriteCase{"pack_csv", {"pack", "--input", kBuffers, "-o", "@out"}},
        WriteCase{"pack_plan", {"pack", "--input", "@plan", "-o", "@out"}},
        WriteCase{"execute_timeline",
                  {"-s", "KILL", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                   "2", "@ranks_limited", SHARDPLAN_BINARY, "execute", "--plan", "@plan", "--steps",
                   "1", "-o", "@out"},
                  "timeout",
                  kMpiFileLimitBytes,
                  true}),
    [](const ::testing::TestParamInfo<WriteCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace shardplan::testing
