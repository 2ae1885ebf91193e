// The `shardplan` command: lists the subcommands (each registers its own flags in its
// *_command.cc), runs the one chosen, and maps errors to exit codes (0 ok, 1 bad input,
// 2 unknown command, CLI11's codes for bad flags, 3 internal error).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/mpi_session.h"
#include "cli/options.h"
#include "models/error.h"
#include "models/suggest.h"

namespace {

// An unknown first word would otherwise read "A subcommand is required".
std::optional<std::string> unknown_command(int argc, char** argv, const CLI::App& app) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  const std::string word = argv[1];
  if (std::find(names.begin(), names.end(), word) != names.end()) return std::nullopt;
  return shardplan::unknown_name_message("command", word, names);
}

// CLI11's "Could not convert: --jobs = 2147483648" (a number past the flag's type), in
// the words of every other error; any text echoed from the command line made printable.
std::string parse_error_text(const CLI::ParseError& error) {
  const std::string text = error.what();
  constexpr std::string_view kConvert = "Could not convert: ";
  if (text.starts_with(kConvert)) {
    if (const auto equals = text.find(" = ", kConvert.size()); equals != std::string::npos) {
      const std::string flag = text.substr(kConvert.size(), equals - kConvert.size());
      return shardplan::printable_message(flag) + ": " +
             shardplan::quote_input(text.substr(equals + 3)) +
             " is not a value it takes (out of its range, or not a number of its kind)";
    }
  }
  // CLI11 echoes a value whole ("File does not exist: <5 000 bytes of a path>").
  return shardplan::printable_message(text, 600);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardplan: plan, simulate and run FSDP training memory and communication"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shardplan ") + SHARDPLAN_VERSION);
  using namespace shardplan;
  const std::vector<Command> commands = {
      add_models_command(app),  add_clusters_command(app),   add_describe_command(app),
      add_plan_command(app),    add_simulate_command(app),   add_sweep_command(app),
      add_execute_command(app), add_trace_command(app),      add_compare_command(app),
      add_pack_command(app),    add_collective_command(app), add_calibrate_command(app),
      add_probe_command(app),   add_version_command(app)};

  // Under mpirun every rank reads the same input and fails the same way: rank 0 alone
  // says so, rather than each rank printing the same lines spliced together. (execute
  // reports what one rank alone finds itself, with the rank.)
  const bool reports = !launched_by_mpi() || launcher_rank() == 0;
  if (auto message = unknown_command(argc, argv, app)) {
    if (reports) std::cerr << "shardplan: error: " << printable_message(*message) << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version are "errors" of code 0; the rest get one line, CLI11's code.
    if (error.get_exit_code() == 0) return app.exit(error);
    if (reports) std::cerr << "shardplan: error: " << parse_error_text(error) << " (see --help)\n";
    return error.get_exit_code();
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const InputError& error) {
    if (reports) std::cerr << "shardplan: error: " << error.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& error) {
    // A path from the command line the file system refuses (too long, a loop of links).
    if (reports) {
      std::cerr << "shardplan: error: " << printable_message(error.path1().string(), 512) << ": "
                << error.code().message() << "\n";
    }
    return 1;
  } catch (const std::bad_alloc&) {
    if (reports) {
      std::cerr << "shardplan: error: out of memory: the job, plan or input is larger than "
                   "this machine's memory allows (docs/formats.md, Limits)\n";
    }
    return 1;
  } catch (const std::exception& error) {
    if (reports) std::cerr << "shardplan: internal error: " << error.what() << "\n";
    return 3;
  }
  return 0;
}
