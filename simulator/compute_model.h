#pragma once

#include <array>
#include <optional>
#include <vector>

#include "models/cluster_spec.h"
#include "planner/plan.h"
#include "simulator/collective_model.h"

namespace shardplan {

// The network tier a collective's bandwidth is bound by.
enum class Tier { none, intra_node, inter_node };

// What one op costs when it runs alone. Collectives split into a size-independent
// latency and a transfer that shares its tier's links with concurrent collectives.
struct OpCost {
  double seconds = 0;          // alone, all of it
  double latency_seconds = 0;  // collectives: the part not shared
  Tier tier = Tier::none;      // collectives only
};

// Compute ops: a roofline per kernel class, summed over the classes an op runs (they run
// one after another): GEMMs at their shapes' rates where the cluster has a measured table
// of their precision, else GEMM FLOPs ÷ (peak × gemm_efficiency), attention FLOPs ÷ (BF16
// peak × attention_efficiency), activation bytes ÷ (measured HBM bandwidth ×
// elementwise_efficiency). GEMMs run at the FP8 peak × fp8_gemm_efficiency under
// fp8_param_gather (Transformer Engine runs them in FP8). The optimizer step is memory-bound over
// the local shard: bytes ÷ (measured HBM bandwidth × optimizer_efficiency). Collectives: the NCCL
// model (collective_model.h) over the ranks of the op's group.
// Seconds per GEMM FLOP of each segment's matmuls at their shapes' rates, forward and
// backward, per precision: every micro-batch runs the same shapes, so a caller that
// prices a whole plan against one cluster passes one cache and each segment is priced once.
struct GemmRateCache {
  // [segment][precision · 2 + backward]: outer nullopt until priced; inner nullopt when
  // there is no table or no matmul shape.
  std::vector<std::array<std::optional<std::optional<double>>, 4>> by_segment;
};

OpCost op_cost(const Plan& plan, const PlanOp& op, const ClusterSpec& cluster,
               GemmRateCache* cache = nullptr);

// A compute or optimizer op's work per kernel class, in seconds at efficiency 1 (the
// peaks op_cost divides by); op_cost's time is compute_seconds of it. Zero for collectives.
struct ComputeWork {
  // GEMMs of a precision the cluster has a measured table for (models/gemm_rate.h): seconds
  // at their shapes' rates, efficiency included; the other fields leave them out.
  double table_gemm_seconds = 0;
  double bf16_gemm = 0;  // ÷ gemm_efficiency
  double fp8_gemm = 0;   // ÷ fp8_gemm_efficiency
  double attention = 0;  // ÷ attention_efficiency, or sdpa_attention_efficiency if sdpa
  double memory = 0;     // ÷ elementwise_efficiency
  double optimizer = 0;  // ÷ optimizer_efficiency
  bool sdpa = false;     // the torch stacks' attention
};
ComputeWork compute_work(const Plan& plan, const PlanOp& op, const ClusterSpec& cluster,
                         GemmRateCache* cache = nullptr);
// Whether the config's attention runs at sdpa_attention_efficiency (FlashAttention-2 under
// PyTorch's SDPA on the torch stacks) rather than attention_efficiency.
bool sdpa_attention(const FsdpConfig& config);
double compute_seconds(const ComputeWork& work, const ComputeSpec& efficiency);

// Where the ranks of a process group sit: its members are `stride` ranks apart, so
// consecutive groups (dp_shard) fill a node before they span nodes and strided ones
// (dp_outer, dp_shard apart) span nodes sooner.
RankLayout group_layout(const Plan& plan, const ProcessGroup& group);

}  // namespace shardplan
