#include "models/model_summary.h"

#include <algorithm>
#include <functional>
#include <set>

#include "models/module_pattern.h"

namespace shardplan {
namespace {

// Module types that name a parameter category, nearest first.
const std::map<std::string, std::string>& kind_of_type() {
  static const std::map<std::string, std::string> kinds = {
      {"Embedding", "embedding"},   {"Attention", "attention"},
      {"MLAttention", "attention"}, {"MLP", "mlp"},
      {"Expert", "experts"},        {"SharedExpert", "shared_experts"},
      {"Router", "router"},         {"RMSNorm", "norm"},
      {"LayerNorm", "norm"},
  };
  return kinds;
}

void walk_parameters(const Module& m, std::vector<const Module*>& path,
                     std::map<std::string, int64_t>& out) {
  path.push_back(&m);
  int64_t own = 0;
  for (const Parameter& p : m.parameters) own += p.numel();
  if (own > 0) out[parameter_kind(path)] += own;
  for (const Module& child : m.children) walk_parameters(child, path, out);
  path.pop_back();
}

}  // namespace

std::string parameter_kind(const std::vector<const Module*>& path) {
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    if (auto found = kind_of_type().find((*it)->type); found != kind_of_type().end()) {
      return found->second;
    }
  }
  const Module* owner = path.back();
  if (owner->name == "lm_head") return "output";
  return owner->type.empty() ? "other" : owner->type;
}

ModelSummary summarize_model(const ModelSpec& spec, const BatchShape& shape) {
  ModelSummary s;
  s.total_parameters = parameter_count(spec.root);
  s.active_parameters = active_parameter_count(spec.root);
  std::vector<const Module*> path;
  walk_parameters(spec.root, path, s.parameters_by_kind);

  const double tokens = static_cast<double>(shape.tokens());
  s.model_flops_per_token = model_training_flops(spec.root, shape) / tokens;
  s.executed_flops_per_token =
      (forward_flops(spec.root, shape) + backward_flops(spec.root, shape)) / tokens;

  const std::vector<const Module*> layers = match_modules(spec.root, spec.default_unit_modules);
  std::set<const Module*> in_layer(layers.begin(), layers.end());
  double layer_none_total = 0;
  for (const Module* layer : layers) {
    const double none = saved_activation_bytes(*layer, shape, Recompute::none);
    layer_none_total += none;
    s.recompute_flops_per_token_selective +=
        recompute_flops(*layer, shape, Recompute::selective) / tokens;
    s.recompute_flops_per_token_full += forward_flops(*layer, shape) / tokens;
    if (spec.arch != nullptr) {
      s.recompute_flops_per_token_sac_op =
          s.recompute_flops_per_token_sac_op.value_or(0) +
          recompute_flops(*layer, shape, Recompute::sac_op) / tokens;
    }
    // Layers group when they have the same type, size and activations.
    const int64_t parameters = parameter_count(*layer);
    auto same = std::find_if(s.layers.begin(), s.layers.end(), [&](const LayerActivations& l) {
      return l.type == layer->type && l.parameters == parameters && l.none_bytes == none;
    });
    if (same != s.layers.end()) {
      ++same->count;
      continue;
    }
    s.layers.push_back(LayerActivations{
        .type = layer->type,
        .count = 1,
        .parameters = parameters,
        .none_bytes = none,
        .selective_bytes = saved_activation_bytes(*layer, shape, Recompute::selective),
        .sac_op_bytes = spec.arch != nullptr ? std::optional(saved_activation_bytes(
                                                   *layer, shape, Recompute::sac_op))
                                             : std::nullopt,
        .full_bytes = saved_activation_bytes(*layer, shape, Recompute::full),
        .full_peak_bytes = none,
    });
  }
  const double all = saved_activation_bytes(spec.root, shape, Recompute::none);
  s.other_activation_bytes = all - layer_none_total;
  s.total_activation_bytes_none = all;
  return s;
}

}  // namespace shardplan
