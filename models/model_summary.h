#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "models/module_cost.h"

namespace shardplan {

// Saved activations of one kind of layer for one micro-batch, per recompute mode.
struct LayerActivations {
  std::string type;        // "DecoderLayer", "MoEDecoderLayer", ...
  int64_t count = 0;       // layers of this type
  int64_t parameters = 0;  // per layer
  double none_bytes = 0;
  double selective_bytes = 0;
  std::optional<double> sac_op_bytes;  // transformer and MoE models (sac_op counts matmuls)
  double full_bytes = 0;               // kept: the layer input
  double full_peak_bytes = 0;          // while its backward re-runs the forward (= none_bytes)
};

// What `shardplan describe` reports about a model for one micro-batch shape.
struct ModelSummary {
  int64_t total_parameters = 0;
  double active_parameters = 0;  // MoE: weighted by the share of tokens each expert sees
  std::map<std::string, int64_t> parameters_by_kind;  // embedding, attention, mlp, ...
  // FLOPs per token of one training step (forward + backward).
  double model_flops_per_token = 0;     // PaLM/Megatron convention: no causal discount
  double executed_flops_per_token = 0;  // causal halving, flash backward 2.5×, no recompute
  double recompute_flops_per_token_selective = 0;  // extra forward work per recompute mode
  double recompute_flops_per_token_full = 0;
  std::optional<double> recompute_flops_per_token_sac_op;
  std::vector<LayerActivations> layers;    // one entry per distinct kind of layer
  double other_activation_bytes = 0;       // outside the layers (embedding, head, loss)
  double total_activation_bytes_none = 0;  // one micro-batch, all layers + the rest
};

// Summarises `spec` for `shape`. Layers are the modules matching the model's
// default_unit_modules; everything else counts as "other".
ModelSummary summarize_model(const ModelSpec& spec, const BatchShape& shape);

// Parameter category of a module path: nearest ancestor (or itself) of a known type.
std::string parameter_kind(const std::vector<const Module*>& path);

}  // namespace shardplan
