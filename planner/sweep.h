#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "traces/timeline.h"

namespace shardplan {

// The configurations a sweep tries: the product of these lists, for a global batch held
// fixed (micro_batch × grad_accum × data-parallel ranks sequences per step, the
// data-parallel ranks being GPUs ÷ (tp × cp)). Every other config field comes from the
// base config.
struct SearchSpace {
  std::vector<int64_t> tp;  // tensor-parallel sizes (sequence parallel on when tp > 1)
  std::vector<int64_t> cp;  // context-parallel sizes (the base config's cp_comm)
  std::vector<ShardingStrategy> strategies;
  std::vector<int64_t> dp_outer;                // each must divide the GPU count; 1 = no HSDP
  std::vector<OuterStrategy> outer_strategies;  // tried where dp_outer > 1
  std::vector<std::optional<int64_t>> bucket_bytes;
  std::vector<int64_t> prefetch;  // forward and backward prefetch depth
  std::vector<Recompute> recompute;
  std::vector<int64_t> micro_batches;  // sequences per micro-batch (must divide the batch)
  int64_t global_batch_sequences = 0;  // per optimizer step, over every GPU
  // FP8 GEMMs, with FP8 weight gathers under ZeRO-3; true is invalid on GPUs without FP8.
  std::vector<bool> fp8;
  std::vector<bool> double_buffer;
  std::vector<Allocator> allocators;
  // PyTorch FSDP's no_sync accumulation (torch stacks, ZeRO-3, more than one micro-batch;
  // elsewhere the point is invalid): fewer reduce-scatters against unsharded gradients.
  std::vector<bool> no_sync;
  // Mixture of experts: expert-parallel sizes and token dispatchers (the base's for dense
  // models).
  std::vector<int64_t> ep;
  std::vector<MoeDispatcher> moe_dispatchers;
};

// What a sweep covers with no flags: for transformer models every power-of-two tp up to
// 8 within an NVLink domain and cp 1, 2 and 4 that the model and the sequence allow (tp
// and cp of the base config for explicit models); ZeRO-1/2/3 (no_shard only for models
// under 2 B parameters), every power-of-two dp_outer with both outer strategies, the
// base bucket, prefetch 0–2, the three recompute modes, micro-batches 1, 2 and 4 for a
// global batch of 4 sequences per GPU, the base config's precision (FP8 only when it asks
// for it), allocator and no_sync. MoE models: ep 1 and every power of two from 8 (one
// NVLink node) to the number of experts that the GPUs allow, both dispatchers.
SearchSpace default_search_space(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& base);

// Reads a search space file (docs/formats.md#search-space): any field left out keeps
// `defaults`'. Errors name `label` and the field.
SearchSpace search_space_from_json(const nlohmann::json& json, const std::string& label,
                                   SearchSpace defaults);

// Every configuration of the space, in a fixed order (the order of the lists above,
// last varying fastest), not yet resolved.
std::vector<FsdpConfig> enumerate_configs(const SearchSpace& space, const FsdpConfig& base,
                                          int64_t num_gpus);

enum class PointState { evaluated, pruned, invalid };

struct SweepPoint {
  FsdpConfig config;  // resolved unless invalid
  PointState state = PointState::evaluated;
  std::string reason;             // invalid: the config error; pruned: why
  double memory_lower_bound = 0;  // bytes per GPU that every plan of this config needs
  double step_lower_bound = 0;    // seconds; 0 when not computed (pruned by memory, invalid)
  TimelineSummary summary;        // evaluated only
  bool fits = false;              // evaluated and peak reserved ≤ the cap
  bool pareto = false;            // on the front of peak reserved vs step time
};

struct SweepResult {
  std::vector<SweepPoint> points;    // in enumeration order
  std::vector<std::size_t> ranking;  // fitting points, fastest first
  int64_t memory_cap = 0;
  int64_t evaluated = 0, pruned = 0, invalid = 0;
  int64_t pruned_by_time = 0;  // of `pruned`: the step-time bound, not memory
  bool pareto = true;          // the front was computed (SweepOptions::pareto)
};

// Predicts one resolved configuration on `cluster` (the simulator, handed in by the
// caller: the planner does not depend on it).
using Evaluator = std::function<TimelineSummary(const FsdpConfig&, const ClusterSpec&)>;

// Evaluates a batch of configurations (indices into the list handed to sweep_configs)
// and returns their summaries in the batch's order, every caller seeing all of them: how
// a sweep spreads over processes (cli: MPI ranks). `here` evaluates any of them on this
// process's threads. None: all of the batch here.
using BatchEvaluator = std::function<std::vector<TimelineSummary>(
    const std::vector<std::size_t>& batch,
    const std::function<std::vector<TimelineSummary>(const std::vector<std::size_t>&)>& here)>;

struct SweepOptions {
  int64_t memory_cap = 0;  // bytes; peak reserved must not exceed it
  int threads = 1;
  bool prune = true;
  // Seconds per micro-batch b such that grad_accum × b bounds the step time of every
  // configuration of the resolved configuration's compute_class from below (asked once
  // per class, for one of its configurations). With it (and prune), configurations are simulated in
  // order of their bound, and one is skipped once `keep` fitting configurations are faster than its
  // bound and (with `pareto`) a simulated one is both faster than its bound and at most its memory
  // bound (it can reach neither the top `keep` nor the Pareto front).
  std::function<double(const FsdpConfig&)> step_lower_bound;
  int64_t keep = 10;
  // Mark the exact Pareto front of peak reserved vs step time. Keeping it exact under the
  // step bound costs simulations (measured: 966 against 546 for llama3.1-405b's default
  // space on 1024 H100); without it the ranking is still exact and no point is marked.
  bool pareto = true;
  BatchEvaluator batch_evaluator;
  // Called after each configuration with (done, total); from worker threads, serialised.
  std::function<void(std::size_t, std::size_t)> progress;
};

// A bound on the memory any plan of `resolved` needs per GPU: persistent state (ZeRO
// table), non-tensor memory, and the most of: one gathered largest unit (ZeRO-3), or what
// the first backward op holds (every unit's saved activations of one micro-batch and,
// under ZeRO-3, the root unit's and the last layer's gathered weights). Tested never to
// exceed a simulated peak.
double memory_lower_bound(const ModelSpec& model, const ClusterSpec& cluster,
                          const FsdpConfig& resolved);

// The configuration with every field that cannot change its compute ops (their FLOPs,
// bytes, and the tensor/context-parallel collectives beside them) set to one value:
// sharding strategy, dp_outer/dp_shard, outer strategy, prefetch, bucket, reduction
// settings, double buffer, allocator and grad_accum. Configurations with equal classes
// share a step_lower_bound (per micro-batch).
FsdpConfig compute_class(const FsdpConfig& config);

// Resolves, prunes (memory bound above the cap; with a step bound, see SweepOptions) and
// evaluates the configurations, in batches of kSweepBatch on `threads` threads (or the
// batch evaluator); the result depends on neither. Ranks the fitting
// points by step time (then peak memory, then enumeration order) and marks the Pareto
// front of peak reserved memory against step time over every evaluated point.
inline constexpr std::size_t kSweepBatch = 16;

SweepResult sweep_configs(const ModelSpec& model, const ClusterSpec& cluster,
                          const std::vector<FsdpConfig>& configs, const Evaluator& evaluate,
                          const SweepOptions& options);

// When nothing fits: what came closest, what the space left out, and the fewest GPUs (the
// job's nodes doubled up to six times) at which the closest configuration fits.
struct NoFitAdvice {
  std::optional<std::size_t> lowest;  // the evaluated point with the least peak memory
  // When every point was pruned: the one with the lowest memory bound.
  std::optional<std::size_t> lowest_bound;
  bool try_full_recompute = false;   // recompute full is not in the space
  bool try_micro_batch_one = false;  // micro-batch 1 is not in the space
  // The point grown to more GPUs: the least-memory evaluated point, else the pruned point
  // that keeps the least activation memory (full recompute, smallest micro-batch), then
  // the lowest bound.
  std::optional<std::size_t> grown;
  int64_t fits_on_nodes = 0;  // 0: not even on 64 times the nodes
  int64_t fits_on_gpus = 0;
  int64_t fits_peak_reserved_bytes = 0;
};

// Searches for the advice above; `evaluate` predicts the grown configurations. The global
// batch per GPU stays (the same micro-batch and grad_accum).
NoFitAdvice advise_no_fit(const SweepResult& result, const SearchSpace& space,
                          const ModelSpec& model, const ClusterSpec& cluster,
                          const Evaluator& evaluate);

// The default memory cap: the GPU's memory less 5 % headroom for what no model sees
// (allocator fragmentation across streams, NCCL buffers of extra communicators,
// framework temporaries); docs/model.md.
int64_t default_memory_cap(const ClusterSpec& cluster);

// One line naming a configuration's choices: "zero3 8×8(optim) pf1 full mb2×ga2 fp8".
std::string describe_config(const FsdpConfig& config);

}  // namespace shardplan
