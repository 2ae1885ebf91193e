#include "simulator/predict_step.h"

#include <algorithm>
#include <memory>

#include "planner/plan_builder.h"
#include "pool/pool.h"
#include "simulator/compute_model.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

struct Simulated {
  TimelineSummary summary;
  double host_per_micro_batch = 0;  // CPU seconds issuing one micro-batch's compute ops
};

Simulated simulate_with(const ModelSpec& model, const ClusterSpec& cluster, FsdpConfig config,
                        int64_t micro_batches) {
  config.grad_accum = micro_batches;
  const std::unique_ptr<OffsetAssigner> online =
      config.allocator != Allocator::pool ? make_online_assigner() : nullptr;
  const Plan plan = build_plan(model, cluster, config, online.get());
  double host = 0;
  for (const PlanOp& op : plan.ops) {
    if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute)
      host += op.host_seconds;
  }
  return {simulate(plan, cluster).summary,
          host * cluster.host_cpu.time_scale / static_cast<double>(micro_batches)};
}

}  // namespace

TimelineSummary predict_step(const ModelSpec& model, const ClusterSpec& cluster,
                             const FsdpConfig& resolved) {
  const int64_t g = resolved.grad_accum;
  if (g <= kDirectMicroBatches) return simulate_with(model, cluster, resolved, g).summary;
  const Simulated two = simulate_with(model, cluster, resolved, 2);
  const Simulated three = simulate_with(model, cluster, resolved, 3);
  const TimelineSummary& a = two.summary;
  const TimelineSummary& b = three.summary;
  const double more = static_cast<double>(g - 3);
  auto extend = [&](double x2, double x3) { return x3 + more * (x3 - x2); };
  TimelineSummary s = b;
  s.step_seconds = extend(a.step_seconds, b.step_seconds);
  s.compute_seconds = extend(a.compute_seconds, b.compute_seconds);
  s.exposed_all_gather_seconds = extend(a.exposed_all_gather_seconds, b.exposed_all_gather_seconds);
  s.exposed_reduce_scatter_seconds =
      extend(a.exposed_reduce_scatter_seconds, b.exposed_reduce_scatter_seconds);
  s.exposed_outer_seconds = extend(a.exposed_outer_seconds, b.exposed_outer_seconds);
  s.exposed_model_parallel_seconds =
      extend(a.exposed_model_parallel_seconds, b.exposed_model_parallel_seconds);
  s.host_wait_seconds = extend(a.host_wait_seconds, b.host_wait_seconds);
  PathBreakdown& p = s.critical_path;
  const PathBreakdown &p2 = a.critical_path, &p3 = b.critical_path;
  p.compute = extend(p2.compute, p3.compute);
  p.all_gather = extend(p2.all_gather, p3.all_gather);
  p.reduce_scatter = extend(p2.reduce_scatter, p3.reduce_scatter);
  p.outer = extend(p2.outer, p3.outer);
  p.optimizer = extend(p2.optimizer, p3.optimizer);
  p.model_parallel = extend(p2.model_parallel, p3.model_parallel);
  p.offload = extend(p2.offload, p3.offload);
  p.host = extend(p2.host, p3.host);
  // The host may run ahead of the GPU over two or three micro-batches and fall behind over
  // more: the step is at least every micro-batch's compute ops issued one after another.
  const double host_floor = static_cast<double>(g) * three.host_per_micro_batch;
  if (host_floor > s.step_seconds) {
    s.host_wait_seconds += host_floor - s.step_seconds;
    s.critical_path.host += host_floor - s.step_seconds;
    s.step_seconds = host_floor;
  }
  // Tokens and model FLOPs grow with the micro-batches exactly; executed FLOPs (the
  // optimizer's included) linearly.
  const double tokens_ratio = static_cast<double>(g) / 3.0 * b.step_seconds / s.step_seconds;
  s.tokens_per_second_per_gpu = b.tokens_per_second_per_gpu * tokens_ratio;
  s.mfu = b.mfu * tokens_ratio;
  s.tflops_per_gpu =
      extend(a.tflops_per_gpu * a.step_seconds, b.tflops_per_gpu * b.step_seconds) / s.step_seconds;
  s.peak_allocated_bytes = std::max(a.peak_allocated_bytes, b.peak_allocated_bytes);
  s.peak_reserved_bytes = std::max(a.peak_reserved_bytes, b.peak_reserved_bytes);
  s.fits = s.peak_reserved_bytes <= s.capacity_bytes;
  return s;
}

double compute_stream_seconds_per_micro_batch(const ModelSpec& model, const ClusterSpec& cluster,
                                              const FsdpConfig& resolved) {
  FsdpConfig one = resolved;
  one.grad_accum = 1;
  // The pool's layout does not enter the bound.
  const std::unique_ptr<OffsetAssigner> assigner = make_online_assigner();
  const Plan plan = build_plan(model, cluster, one, assigner.get());
  double seconds = 0;
  double host = 0;  // the CPU issues every micro-batch's compute ops one after another
  GemmRateCache rates;
  for (const PlanOp& op : plan.ops) {
    const bool compute =
        op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute;
    const bool blocking_model_parallel =
        op.stream == Stream::compute && is_model_parallel_group(plan, op.group);
    if (compute || blocking_model_parallel) seconds += op_cost(plan, op, cluster, &rates).seconds;
    if (compute) host += op.host_seconds * cluster.host_cpu.time_scale;
  }
  return std::max(seconds, host);
}

}  // namespace shardplan
