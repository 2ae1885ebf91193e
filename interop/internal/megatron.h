#pragma once

// Megatron-LM's arguments as read from a command line or from Megatron-Bridge's fields
// (which carry the same names as Megatron's dataclasses), and their meaning for shardplan.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "interop/stack_job.h"

namespace shardplan {

// One argument's value: a string as typed on a command line (a list for nargs '+', true
// or false for store_true / store_false), or a JSON number, bool, string or null from a
// Bridge config.
struct MegatronValue {
  nlohmann::json value;
  std::string name;  // as the input wrote it ("--micro-batch-size", "train.micro_batch_size")
};

struct MegatronArgs {
  std::map<std::string, MegatronValue> values;  // by Megatron's dest ("micro_batch_size")
  std::vector<std::string> ignored;             // read, no bearing on the plan (launcher words)
  std::vector<std::string> not_modelled;        // read, not used (a launcher value it cannot read)
  std::vector<std::string> unknown;
  std::optional<int64_t> gpus;       // torchrun's --nproc-per-node × --nnodes
  bool expandable_segments = false;  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
};

// A Megatron flag as parsed by Megatron's argparse (interop/data/megatron_flags.json).
struct MegatronFlag {
  std::string dest;
  std::string arity;   // none | one | many | optional
  std::string action;  // store_true | store_false | ... (arity none)
};

// The flags of Megatron-LM d98e8a6 by option string ("--micro-batch-size").
const std::map<std::string, MegatronFlag>& megatron_flags();
// The option string for a dest, as `emit` writes it (the first alias in the table).
std::string megatron_flag_for(const std::string& dest);

// Words of a command line or a launch script: Megatron's flags wherever they stand (a
// script defines its arrays before the torchrun line), torchrun's own flags (the GPU
// count), other words (commands, the script, unexpanded variables) listed as ignored.
// Unknown flags are kept in `unknown` with the nearest known one.
MegatronArgs parse_megatron_words(const std::vector<std::string>& words, const std::string& label);

// The job the arguments describe (model, config, GPUs, batch), with every argument
// accounted for in the StackJob's lists.
StackJob megatron_stack_job(const MegatronArgs& args, StackFormat format, const std::string& label);

}  // namespace shardplan
