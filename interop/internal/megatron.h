#pragma once

// Megatron-LM's arguments as read from a command line or from Megatron-Bridge's fields
// (which carry the same names as Megatron's dataclasses), and their meaning for shardplan.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
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

// The words of a launch script's commands (each command's words apart, so a flag's values
// end with its command): Megatron's flags, the launcher's own flags (torchrun's, the
// DeepSpeed launcher's: the GPU count), other words (commands, the script, values left as
// written) listed as ignored. Unknown flags are kept in `unknown`, the first few with the
// nearest known one. A flag given twice keeps its last value, as Megatron's argparse does,
// with a note when the values differ.
MegatronArgs parse_megatron_words(const std::vector<std::vector<std::string>>& commands,
                                  const std::string& label);

// The arguments a launch script (or a command line) passes, read as bash would run it
// (shell_script.h): the words of its commands, but `echo`'s and `printf`'s, which only print
// theirs. A script whose commands pass no flag is a file of arrays to paste (what `--emit
// megatron-args` writes): its variables that hold flags and that no command uses are the
// arguments. PYTORCH_CUDA_ALLOC_CONF as the launcher sees it (exported, or set before the
// command) gives the allocator; what the script left unread is noted.
MegatronArgs parse_megatron_script(std::string_view text, const std::string& label);

// The job the arguments describe (model, config, GPUs, batch), with every argument
// accounted for in the StackJob's lists.
StackJob megatron_stack_job(const MegatronArgs& args, StackFormat format, const std::string& label);

}  // namespace shardplan
