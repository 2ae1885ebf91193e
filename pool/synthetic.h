#pragma once

#include <cstdint>
#include <vector>

#include "pool/pool.h"

namespace shardplan {

// A training step's buffers as a graph compiler sees them (the shape of the SOMAS traces
// in benchmarks/minimalloc/idealloc): per transformer layer a forward pass that gathers
// weights one op ahead, produces activations (those the backward needs live until it,
// the rest are read by the next one to three ops) and short workspaces; then the backward
// in reverse, whose input gradients live one or two ops, weight gradients until their
// reduce-scatter a few ops later, and which frees each saved activation; embedding and
// logits at the ends; micro-batches one after the other (or interleaved as in a pipeline
// stage's 1F1B schedule: `pipelined`). With `experts` > 0 every layer's
// MLP is a mixture of experts whose token counts per expert come from a skewed routing,
// as in Mixtral or DeepSeek: many buffers of many sizes in one stretch of time, the hard
// case for packing. `compiled_step`: the step as a graph compiler that plans it whole
// sees it (MindSpore's SOMAS, XLA): each weight's gradient accumulates in a buffer that
// lives from its first backward to the optimizer's update at the end of the step, each
// op keeps up to three small results apart, and a few buffers live over the whole step:
// long-lived large buffers under many short ones, in one time window. Sizes come from a
// model picked by the seed (hidden size, tokens, vocabulary) with per-op variety (fused
// ops, odd workspaces). Time is the op index. Deterministic: the same options give the
// same trace on every platform (SplitMix64 and integer arithmetic only, no std::
// distributions).
struct SyntheticTraceOptions {
  int64_t buffers = 10000;  // about this many: whole layers are generated
  uint64_t seed = 1;
  int experts = 0;        // 0: dense MLP
  int micro_batches = 0;  // 0: as many as `buffers` needs past the model's layers
  bool pipelined = false;
  bool compiled_step = false;
};

std::vector<PoolRequest> synthetic_training_trace(const SyntheticTraceOptions& options);

}  // namespace shardplan
