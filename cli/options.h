#pragma once

// How each command file registers its subcommand with CLI11, and the flag checks and job
// flags several commands share. main.cc only lists the commands and maps errors to exit
// codes.
#include <CLI/CLI.hpp>
#include <functional>

#include "cli/commands.h"

namespace shardplan {

// A registered subcommand: its parser, and what runs when the command line chose it (its
// params struct lives in the closure).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// One per command, in the order `shardplan --help` lists them.
Command add_models_command(CLI::App& app);
Command add_clusters_command(CLI::App& app);
Command add_describe_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_execute_command(CLI::App& app);
Command add_trace_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_pack_command(CLI::App& app);
Command add_collective_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);
Command add_probe_command(CLI::App& app);
Command add_version_command(CLI::App& app);

// A whole-number flag of at least 1 / at least 0. CLI11's PositiveNumber prints "Value 0
// not in range 0.000000 to 1.79e308" and its NonNegativeNumber accepts fractions.
const CLI::Validator& positive_whole_number();
const CLI::Validator& non_negative_whole_number();

// --model, --cluster, --nodes, --gpus, --config and --set.
void add_job_options(CLI::App& command, JobParams& job);

}  // namespace shardplan
