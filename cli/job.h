#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "interop/stack_job.h"
#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// A model on a cluster under a resolved FSDP config: what every planning command starts
// from. `extra_overrides` are flag values (--micro-batch ...) applied after --set.
struct Job {
  ModelSpec model;
  ClusterSpec cluster;
  FsdpConfig config;
  std::optional<StackJob> stack;  // the stack config it was read from, if any
};

Job load_job(const JobParams& params, const std::vector<std::string>& extra_overrides = {});

// What of a stack's config was not used: to stderr for a person (not with --json), and
// under "stack_input" in a command's JSON.
void print_stack_notes(const Job& job, bool json);
void add_stack_notes(const Job& job, nlohmann::json& out);

// --emit FORMAT: the job's resolved config as that stack's text; throws on an unknown name.
std::string emit_text(const std::string& format, const ModelSpec& model, const ClusterSpec& cluster,
                      const FsdpConfig& config);

}  // namespace shardplan
