#include "cli/options.h"

#include <string>

#include "models/cluster_spec.h"
#include "models/error.h"
#include "models/zoo.h"

namespace shardplan {
namespace {

CLI::Validator whole_number_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        try {
          std::size_t used = 0;
          const long long value = std::stoll(text, &used);
          if (used != text.size()) return "expected a whole number, got " + quote_input(text);
          if (value < min) {
            return min == 1 ? "must be positive, got " + text
                            : "must be at least " + std::to_string(min) + ", got " + text;
          }
          return "";
        } catch (const std::exception&) {
          return "expected a whole number, got " + quote_input(text);
        }
      },
      min == 1 ? "POSITIVE" : "INT>=" + std::to_string(min));
}

}  // namespace

const CLI::Validator& positive_whole_number() {
  static const CLI::Validator validator = whole_number_at_least(1);
  return validator;
}

const CLI::Validator& non_negative_whole_number() {
  static const CLI::Validator validator = whole_number_at_least(0);
  return validator;
}

void add_job_options(CLI::App& command, JobParams& job) {
  job.cluster = kDefaultCluster;
  command.add_option(
      "--model", job.model,
      std::string("zoo model name or model JSON file (default ") + kDefaultModel + ")");
  command.add_option("--cluster", job.cluster, "zoo cluster name or cluster JSON file")
      ->capture_default_str();
  command.add_option("--nodes", job.nodes, "nodes in the job (default 1)")
      ->check(positive_whole_number());
  command.add_option("--gpus", job.gpus, "GPUs in the job, instead of --nodes")
      ->check(positive_whole_number());
  command.add_option("--config", job.config_file, "FSDP config JSON file")
      ->check(CLI::ExistingFile);
  command.add_option("--set", job.overrides, "override a config field: key=value (repeatable)");
  // An empty value would read as "not given" and plan the default model.
  command
      .add_option("--from-megatron", job.from_megatron,
                  "model, mesh and config from a Megatron-LM command line (the text, or a "
                  "file holding it)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.find_first_not_of(" \t\r\n") == std::string::npos
                       ? "nothing to read: give a Megatron-LM command line or a file holding one"
                       : "";
          },
          "TEXT|FILE"));
  command
      .add_option("--from-megatron-bridge", job.from_megatron_bridge,
                  "... from Megatron-Bridge recipe fields (JSON, or cfg.x.y = v lines)")
      ->check(CLI::ExistingFile);
  command.add_option("--from-torchtitan", job.from_torchtitan, "... from a torchtitan job TOML")
      ->check(CLI::ExistingFile);
}

}  // namespace shardplan
