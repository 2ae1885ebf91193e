#include "simulator/compute_model.h"

#include <algorithm>
#include <optional>

namespace shardplan {

RankLayout group_layout(const Plan& plan, const ProcessGroup& group) {
  return group_layout(group, plan.gpus_per_node);
}

namespace {

// Seconds per GEMM FLOP of `op`'s matmuls at their shapes' rates in `precision`, from
// the cluster's table; nullopt without a table (or matmul shapes). The op's own GEMM
// FLOPs are then timed at this rate: a recompute's re-run matmuls and the output layer
// under FP8 run at the mix of the segment's shapes.
std::optional<double> shapes_seconds_per_flop(const Plan& plan, const PlanOp& op,
                                              const ComputeSpec& compute, GemmPrecision precision,
                                              double peak_flops) {
  const GemmTable* dense = find_gemm_table(compute, precision, false);
  if (dense == nullptr) return std::nullopt;
  const GemmTable* grouped = find_gemm_table(compute, precision, true);
  double seconds = 0, flops = 0;
  for (const GemmShape& g : op_gemms(plan, op)) {
    seconds += gemm_seconds(g.groups > 1 ? *grouped : *dense, g, peak_flops);
    flops += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  }
  if (!(flops > 0)) return std::nullopt;
  return seconds / flops;
}

// The same, priced once per segment, direction and precision when a cache is given.
std::optional<double> table_seconds_per_flop(const Plan& plan, const PlanOp& op,
                                             const ComputeSpec& compute, GemmPrecision precision,
                                             double peak_flops, GemmRateCache* cache) {
  if (cache == nullptr || op.segment < 0)
    return shapes_seconds_per_flop(plan, op, compute, precision, peak_flops);
  const auto segments = plan.segments.size();
  if (cache->by_segment.size() != segments) cache->by_segment.assign(segments, {});
  const auto s = static_cast<std::size_t>(op.segment);
  const std::size_t slot = static_cast<std::size_t>(precision) * 2 + (op.kind == OpKind::backward);
  std::optional<std::optional<double>>& rate = cache->by_segment[s][slot];
  if (!rate) rate = shapes_seconds_per_flop(plan, op, compute, precision, peak_flops);
  return *rate;
}

}  // namespace

bool sdpa_attention(const FsdpConfig& config) {
  return config.stack != Stack::megatron_te && config.sdpa_backend == SdpaBackend::flash;
}

ComputeWork compute_work(const Plan& plan, const PlanOp& op, const ClusterSpec& cluster,
                         GemmRateCache* cache) {
  const GpuSpec& gpu = cluster.gpu;
  ComputeWork w;
  // FlashAttention-2 on the torch stacks' SDPA; cuDNN's attention is Transformer Engine's.
  w.sdpa = sdpa_attention(plan.config);
  switch (op.kind) {
    case OpKind::forward:
    case OpKind::backward:
    case OpKind::recompute: {
      const bool fp8 = fp8_compute(plan.config) && gpu.fp8_dense_flops > 0;
      // Tensor-core work slows with the clocks a power limit allows; memory-bound work is
      // taken as unchanged.
      const double share = power_limited_compute_share(gpu);
      const double bf16_peak = share * gpu.bf16_dense_flops;
      // The output layer's GEMMs stay in BF16 under FP8.
      const double bf16_gemm = fp8 ? op.bf16_gemm_flops : 0.0;
      const double gemm = std::max(op.flops - op.attention_flops - bf16_gemm, 0.0);
      const double fp8_flops = fp8 ? gemm : 0.0;
      const double bf16_flops = fp8 ? bf16_gemm : gemm;
      const ComputeSpec& e = cluster.compute;
      if (const auto rate =
              table_seconds_per_flop(plan, op, e, GemmPrecision::bf16, bf16_peak, cache);
          rate && bf16_flops > 0) {
        w.table_gemm_seconds += bf16_flops * *rate;
      } else {
        w.bf16_gemm = bf16_flops / bf16_peak;
      }
      if (fp8_flops > 0) {
        const double fp8_peak = share * gpu.fp8_dense_flops;
        if (const auto rate =
                table_seconds_per_flop(plan, op, e, GemmPrecision::fp8, fp8_peak, cache)) {
          w.table_gemm_seconds += fp8_flops * *rate;
        } else {
          w.fp8_gemm = fp8_flops / fp8_peak;
        }
      }
      w.attention = op.attention_flops / bf16_peak;
      w.memory = op.bytes / gpu.hbm_measured_bandwidth_bytes_per_s;
      break;
    }
    case OpKind::optimizer_step:
      w.optimizer = op.bytes / gpu.hbm_measured_bandwidth_bytes_per_s;
      break;
    default:
      break;
  }
  return w;
}

double compute_seconds(const ComputeWork& w, const ComputeSpec& e) {
  return w.table_gemm_seconds + w.bf16_gemm / e.gemm_efficiency +
         w.fp8_gemm / e.fp8_gemm_efficiency +
         w.attention / (w.sdpa ? e.sdpa_attention_efficiency : e.attention_efficiency) +
         w.memory / e.elementwise_efficiency + w.optimizer / e.optimizer_efficiency;
}

OpCost op_cost(const Plan& plan, const PlanOp& op, const ClusterSpec& cluster,
               GemmRateCache* cache) {
  switch (op.kind) {
    case OpKind::forward:
    case OpKind::backward:
    case OpKind::recompute:
    case OpKind::optimizer_step:
      return {.seconds = compute_seconds(compute_work(plan, op, cluster, cache), cluster.compute)};
    case OpKind::offload:
    case OpKind::reload:
      // Activation offload: a layer's saved bytes over the host link (copy engines;
      // their HBM traffic is not charged to the compute ops beside them).
      return {.seconds = op.bytes / cluster.host_link.measured_bandwidth_bytes_per_s};
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::send_recv:
    case OpKind::all_to_all: {
      const Collective c = op.kind == OpKind::all_gather       ? Collective::all_gather
                           : op.kind == OpKind::reduce_scatter ? Collective::reduce_scatter
                           : op.kind == OpKind::all_reduce     ? Collective::all_reduce
                           : op.kind == OpKind::send_recv      ? Collective::send_recv
                                                               : Collective::all_to_all;
      if (op.group < 0 || op.bytes <= 0) return {};
      const RankLayout layout =
          group_layout(plan, plan.process_groups[static_cast<std::size_t>(op.group)]);
      if (layout.ranks <= 1) return {};
      const CollectiveEstimate est = estimate_collective(cluster, c, op.bytes, layout);
      return {.seconds = est.seconds,
              .latency_seconds = est.latency_seconds,
              .tier = layout.nodes() > 1 ? Tier::inter_node : Tier::intra_node};
    }
  }
  return {};
}

}  // namespace shardplan
