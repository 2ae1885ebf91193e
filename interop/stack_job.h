#pragma once

// The training stacks' own configs, in and out: a Megatron-LM command line, a
// Megatron-Bridge recipe's fields and a torchtitan job TOML read into the model, GPUs and
// FsdpConfig they describe; a resolved job written back as the flags, Python overrides or
// TOML to paste. docs/user-guide.md "From your training script".
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

enum class StackFormat { megatron_args, megatron_bridge, torchtitan };

std::string_view stack_format_name(StackFormat format);  // "megatron-args", ...
std::optional<StackFormat> parse_stack_format(std::string_view text);
std::vector<std::string> stack_format_names();

// What a stack's config says about a job, in shardplan's terms, and what of it shardplan
// did not use. Every argument read lands in exactly one place: a model or config field,
// `ignored`, `not_modelled` or `unknown`.
struct StackJob {
  StackFormat format = StackFormat::megatron_args;
  std::string label;                                 // the file, or the flag for inline text
  nlohmann::json model;                              // a model file (family transformer / moe)
  std::string zoo_model;                             // or a zoo name (torchtitan's flavours)
  nlohmann::json config = nlohmann::json::object();  // FsdpConfig fields
  std::optional<int64_t> gpus;                       // the launcher's world size
  std::optional<int64_t> global_batch;               // sequences per optimizer step
  std::vector<std::string> ignored;                  // no effect on memory or step time
  std::vector<std::string> not_modelled;             // may change them; what shardplan did instead
  std::vector<std::string> unknown;  // not an argument of the stack (nearest one named)
};

// A Megatron-LM command line (`torchrun ... pretrain_gpt.py --flag value ...`) given
// inline or in a file (shell words, `\` continuations, `#` comments and bash arrays
// `NAME=( ... )` are read; launcher flags before the script give the GPU count). Flag
// names, arities and defaults are Megatron-LM's at d98e8a6 (interop/data).
StackJob read_megatron_args(const std::string& text_or_file);
// Megatron-Bridge's ConfigContainer fields: a JSON object ({"model": {...}, "ddp": {...}})
// or lines of overrides as `emit megatron-bridge` writes them (`cfg.ddp.use_megatron_fsdp =
// True`, or Hydra's `ddp.use_megatron_fsdp=true`).
StackJob read_megatron_bridge(const std::string& file);
// torchtitan's job config (the TOML schema of v0.2.x, torchtitan/config/job_config.py).
StackJob read_torchtitan_toml(const std::string& file);
StackJob read_stack_config(StackFormat format, const std::string& input);

// The model a StackJob describes: the zoo model it names, or the zoo model with the same
// architecture (so a plan names it as the zoo does), else its model file built.
ModelSpec stack_job_model(const StackJob& job);

// The name a config field (a JSON path such as "/tp") has in the stack's config
// ("--tensor-model-parallel-size", "model.tensor_model_parallel_size", "[parallelism]
// tensor_parallel_degree"); empty when the stack has no setting for it.
std::string stack_field_name(StackFormat format, std::string_view field);

// The StackJob's notes as JSON: {"format", "input", "ignored", "not_modelled", "unknown"}.
nlohmann::json stack_job_notes_json(const StackJob& job);
// The same as lines for a terminal ("shardplan: note: ..."); empty when there is nothing.
std::string stack_job_notes_text(const StackJob& job);

// Micro-batches per step from the global batch: global ÷ (micro_batch × data-parallel
// ranks); errors (naming the input) when it does not divide.
int64_t grad_accum_from_global_batch(const StackJob& job, int64_t global_batch, int64_t micro_batch,
                                     int64_t data_parallel);

// The job as the stack's config: Megatron-LM flags (a bash array to paste), Megatron-Bridge
// overrides on a recipe's `cfg`, or a torchtitan TOML. What the stack cannot express is a
// comment beside the nearest setting. Reading the text back gives the same model, GPUs and
// config (tests/interop/round_trip_test.cc).
std::string emit_stack_config(StackFormat format, const ModelSpec& model,
                              const ClusterSpec& cluster, const FsdpConfig& config);

}  // namespace shardplan
