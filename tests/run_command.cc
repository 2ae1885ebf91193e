#include "tests/run_command.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace shardplan::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::path(::testing::TempDir()) /
             ("shardplan_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// In a forked child: replaces it with `program`, or exits 127.
[[noreturn]] void exec_program(const std::string& program, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string binary = program;
  argv.push_back(binary.data());
  std::vector<std::string> copies = args;
  for (std::string& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execvp(binary.c_str(), argv.data());
  ::_exit(127);
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

CommandResult run_shardplan(const std::vector<std::string>& args) {
  return run_program(SHARDPLAN_BINARY, args);
}

CommandResult run_program(const std::string& program, const std::vector<std::string>& args) {
  static int counter = 0;
  const auto dir = temp_dir();
  const std::string out_path = (dir / ("out" + std::to_string(counter))).string();
  const std::string err_path = (dir / ("err" + std::to_string(counter++))).string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    exec_program(program, args);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = exit_code_of(status);
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

CommandResult run_with_file_size_limit(const std::string& program,
                                       const std::vector<std::string>& args,
                                       int64_t max_file_bytes) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    const rlimit limit{static_cast<rlim_t>(max_file_bytes), static_cast<rlim_t>(max_file_bytes)};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    exec_program(program, args);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = exit_code_of(status);
  return result;
}

nlohmann::json stdout_json(const CommandResult& result) {
  try {
    return nlohmann::json::parse(result.out);
  } catch (const nlohmann::json::parse_error& e) {
    ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << result.out << result.err;
    return nlohmann::json();
  }
}

std::string write_temp_file(const std::string& name, const std::string& text) {
  const auto path = temp_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace shardplan::testing
