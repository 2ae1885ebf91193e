#pragma once

#include <memory>

#include "models/model_spec.h"
#include "models/module_cost.h"
#include "models/transformer_builder.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// The model one rank of a config's mesh holds and runs: the whole model without tensor
// or context parallelism, else the model rebuilt for one rank (parallel_model: weights
// split over tp, the vocabulary padded, activations and FLOPs per rank, the tp and cp
// collectives of every module). The config must be resolved (resolve_fsdp_config checked
// that the model can be split); `whole` must outlive this. A split is a pure function of
// the architecture and the mesh, and a sweep asks for the same few thousands of times:
// the last splits are kept (rank_model.cc) and shared.
class RankModel {
 public:
  RankModel(const ModelSpec& whole, const FsdpConfig& config);
  const ModelSpec& get() const { return own_ ? *own_ : *whole_; }

 private:
  const ModelSpec* whole_;
  std::shared_ptr<const ModelSpec> own_;
};

// One micro-batch on one rank of a resolved config: micro_batch sequences of seq_len
// tokens, seq_len / cp of them held here, activations in the parameter dtype.
inline BatchShape rank_batch_shape(const FsdpConfig& c) {
  return BatchShape{.micro_batch = c.micro_batch,
                    .seq_len = c.seq_len,
                    .activation_bytes = dtype_bytes(c.param_dtype),
                    .context_parallel = c.cp,
                    .fp8 = fp8_compute(c),
                    .stack = c.stack,
                    .fused_rms_norm = c.fused_rms_norm,
                    .loss_kernel = c.loss_kernel,
                    .recompute_modules = c.recompute_modules,
                    .cuda_graphs = c.cuda_graphs};
}

}  // namespace shardplan
