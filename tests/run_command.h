#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shardplan::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the built `shardplan` binary with `args` (no shell: each argument is passed as
// is) and captures its output and exit code.
CommandResult run_shardplan(const std::vector<std::string>& args);

// Runs `program` (a path, or a name looked up on PATH) the same way.
CommandResult run_program(const std::string& program, const std::vector<std::string>& args);

// Runs `program` with RLIMIT_FSIZE at `max_file_bytes`: the kernel kills it (SIGXFSZ)
// the moment it writes past that offset in any regular file, which is a process killed
// in the middle of writing its output. stdout and stderr go to /dev/null, which the limit
// does not cover; `exit_code` is 128 + the signal when it was killed.
CommandResult run_with_file_size_limit(const std::string& program,
                                       const std::vector<std::string>& args,
                                       int64_t max_file_bytes);

// Parses stdout as JSON; fails the current test if it does not parse.
nlohmann::json stdout_json(const CommandResult& result);

// Writes `text` to a fresh file under the test temp directory and returns its path.
std::string write_temp_file(const std::string& name, const std::string& text);

}  // namespace shardplan::testing
