#pragma once

#include <optional>
#include <string>

namespace shardplan {

// Bytes per GPU by what holds them: the shape the closed-form estimate (describe, the
// sweep's pruning bound) and a plan's exact accounting share, so both name and rank
// their terms the same way.
struct MemoryBreakdown {
  // Persistent.
  double model_weights = 0;  // compute-dtype weights (FP8 copies with fp8_param_gather)
  double main_weights = 0;   // fp32 master weights
  double main_grads = 0;
  // PyTorch FSDP (torch_fsdp_layout): the main grads live from a step's first reduction to
  // zero_grad, as transient buffers: in a plan's pool, not added again to its total.
  bool main_grads_transient = false;
  double optimizer_states = 0;  // Adam: two fp32 states; SGD: fp32 momentum
  double double_buffers = 0;    // double_buffer: two persistent unsharded-unit buffers
  // Transient peaks (each the most of that kind live at once).
  double unsharded_weights = 0;
  double unsharded_grads = 0;
  double activations = 0;  // saved and recomputed
  double fp8_transpose_cache = 0;
  double comm_buffers = 0;  // tensor- and context-parallel collectives' buffers
  double non_tensor = 0;    // CUDA context, NCCL, cuBLAS (cluster constant)
  double total = 0;
  double capacity = 0;  // HBM as CUDA reports it
  double headroom = 0;  // capacity − total; negative: does not fit
  bool fits = false;
  std::string largest_term;  // the biggest term above, by name
};

// Fills total, headroom, fits and largest_term. `transient`: what the transient buffers
// take together (a plan's pool, or its live-bytes bound); none: the sum of their peaks,
// as the closed-form estimate adds them.
void settle_memory_totals(MemoryBreakdown& m, std::optional<double> transient, double capacity);

}  // namespace shardplan
