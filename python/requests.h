#pragma once

// The Python module's requests: one JSON object per call (the dict given to
// shardplan.plan(...) and the others), read into the params struct that the command's
// flags fill on the command line. Keys are the long flag names with '-' as '_' ("model",
// "gpus", "micro_batch", ...); a key the command does not take, a value of the wrong type
// or out of a flag's range throws InputError naming the key. Null means "not given".
//
// Beyond the flags: "model" may be a model object and "config" an object of FsdpConfig
// fields (JobParams::model_json, config_json); "set" may be an object {key: value}. Every
// params struct comes back with json = true.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace shardplan {

DescribeParams describe_request(const nlohmann::json& request);
PlanParams plan_request(const nlohmann::json& request);
SimulateParams simulate_request(const nlohmann::json& request);
SweepParams sweep_request(const nlohmann::json& request);
PackParams pack_request(const nlohmann::json& request);
CollectiveParams collective_request(const nlohmann::json& request);

// The keys a command's request takes, in the order its --help lists the flags (for
// docstrings and messages). `command` is "describe", "plan", ...; unknown: empty.
std::vector<std::string> request_keys(const std::string& command);

// "shardplan.plan": the label (InputError::file) of a command's request errors.
std::string request_label(const std::string& command);

}  // namespace shardplan
