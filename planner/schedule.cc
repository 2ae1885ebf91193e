#include "planner/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "planner/sharding.h"

namespace shardplan {
namespace {

// Builds the op list in a valid topological order and records, per transient buffer, the
// first and last op that touch it.
class Emitter {
 public:
  explicit Emitter(Plan& plan) : plan_(plan) {}

  int64_t op(PlanOp o) {
    o.id = static_cast<int64_t>(plan_.ops.size());
    std::sort(o.deps.begin(), o.deps.end());
    o.deps.erase(std::unique(o.deps.begin(), o.deps.end()), o.deps.end());
    for (int64_t b : o.reads) touch(b, o.id);
    for (int64_t b : o.writes) touch(b, o.id);
    plan_.ops.push_back(std::move(o));
    return plan_.ops.back().id;
  }

  int64_t transient(BufferRole role, int64_t unit, int64_t group, int64_t micro_batch, DType dtype,
                    double bytes, std::string name) {
    PlanBuffer b{.id = static_cast<int64_t>(plan_.buffers.size()),
                 .role = role,
                 .unit = unit,
                 .group = group,
                 .micro_batch = micro_batch,
                 .dtype = dtype,
                 .bytes = static_cast<int64_t>(bytes),
                 .persistent = false,
                 .live_begin = -1,
                 .live_end = -1,
                 .name = std::move(name)};
    plan_.buffers.push_back(std::move(b));
    return plan_.buffers.back().id;
  }

 private:
  void touch(int64_t buffer, int64_t op_id) {
    PlanBuffer& b = plan_.buffers[static_cast<std::size_t>(buffer)];
    if (b.persistent) return;
    if (b.live_begin < 0) b.live_begin = op_id;
    b.live_end = std::max(b.live_end, op_id + 1);
  }

  Plan& plan_;
};

// A buffer read by an op on a communication stream is free only once a compute op waits
// for that op (Megatron-FSDP frees gradient buffers when backward reaches the drain, or
// in the final callback): the compute stream is where the host frees memory in program
// order, and every allocating op depends on the compute op emitted before it.
void free_after_waiters(Plan& plan) {
  const std::vector<int64_t> waiter = earliest_compute_waiters(plan);
  const auto none = static_cast<int64_t>(plan.ops.size());
  for (const PlanOp& op : plan.ops) {
    if (op.stream == Stream::compute) continue;
    for (const auto* list : {&op.reads, &op.writes}) {
      for (int64_t id : *list) {
        PlanBuffer& b = plan.buffers[static_cast<std::size_t>(id)];
        const int64_t w = waiter[static_cast<std::size_t>(op.id)];
        if (!b.persistent && w != none) b.live_end = std::max(b.live_end, w);
      }
    }
  }
}

std::string unit_label(const Plan& plan, int64_t unit) {
  const std::string& name = plan.units[static_cast<std::size_t>(unit)].name;
  return name.empty() ? "<root>" : name;
}

}  // namespace

void build_schedule(Plan& plan) {
  const FsdpConfig& c = plan.config;
  const ShardingTraits s = sharding_traits(c);
  const int64_t shard_group = find_process_group(plan, "dp_shard");
  const int64_t outer_group = find_process_group(plan, "dp_outer");
  Emitter emit(plan);
  const auto num_units = plan.units.size();
  const int64_t last_mb = c.grad_accum - 1;
  const double gather_bytes =
      c.fp8_param_gather ? 1.0 : static_cast<double>(dtype_bytes(c.param_dtype));
  const double grad_bytes = static_cast<double>(dtype_bytes(c.grad_reduce_dtype));

  // Persistent buffers by (unit, role), for reads and writes.
  std::vector<std::vector<int64_t>> weights(num_units), main_grads(num_units), optimizer(num_units);
  std::vector<int64_t> double_buffers;
  for (const PlanBuffer& b : plan.buffers) {
    if (!b.persistent) continue;
    if (b.role == BufferRole::double_buffer) {
      double_buffers.push_back(b.id);
      continue;
    }
    if (b.unit < 0) continue;
    auto u = static_cast<std::size_t>(b.unit);
    if (b.role == BufferRole::model_weight || b.role == BufferRole::fp8_columnwise_weight) {
      weights[u].push_back(b.id);
    } else if (b.role == BufferRole::main_grad) {
      main_grads[u].push_back(b.id);
    } else if (b.role == BufferRole::main_weight || b.role == BufferRole::optimizer_state) {
      optimizer[u].push_back(b.id);
    }
  }

  auto unsharded_bytes = [&](int64_t unit, double element_bytes, bool trainable_only) {
    double total = 0;
    for (int64_t g : plan.units[static_cast<std::size_t>(unit)].groups) {
      const ParamGroup& group = plan.groups[static_cast<std::size_t>(g)];
      if (trainable_only && !group.requires_grad) continue;
      total += static_cast<double>(group.padded_elements) * element_bytes;
    }
    return total;
  };
  auto has_grads = [&](int64_t unit) { return unsharded_bytes(unit, 1.0, true) > 0; };

  // Layer units in forward order (every unit but the root owns exactly one segment).
  std::vector<int64_t> layers;
  for (const PlanSegment& seg : plan.segments) {
    if (seg.unit != 0) layers.push_back(seg.unit);
  }
  // Double buffering: layer units alternate between two persistent buffers per role.
  const bool double_buffered = c.double_buffer && !double_buffers.empty();
  auto double_buffer_for = [&](int64_t layer_index, bool grad) -> int64_t {
    return double_buffers[static_cast<std::size_t>((grad ? 2 : 0) + layer_index % 2)];
  };

  // The root unit is gathered when it has parameters and work of its own: a captured
  // model's root may hold nothing outside its units (nn.TransformerEncoder).
  const bool gather_root = s.shard_params && unsharded_bytes(0, 1.0, false) > 0 &&
                           std::any_of(plan.segments.begin(), plan.segments.end(),
                                       [](const PlanSegment& seg) { return seg.unit == 0; });

  std::vector<int64_t> last_reduce(num_units, -1);  // final reduction op per unit
  std::vector<int64_t> next_start_deps;
  for (int64_t mb = 0; mb < c.grad_accum; ++mb) {
    const bool reduce_now = s.shard_grads || mb == last_mb;
    std::vector<int64_t> ag_fwd(num_units, -1), ag_bwd(num_units, -1), rs_op(num_units, -1);
    std::vector<int64_t> unsharded_fwd(num_units, -1), unsharded_bwd(num_units, -1),
        unsharded_grad(num_units, -1), transpose_cache(num_units, -1);

    auto gather = [&](int64_t unit, bool backward, int64_t layer_index, std::vector<int64_t> deps) {
      int64_t buffer;
      if (double_buffered && unit != 0) {
        buffer = double_buffer_for(layer_index, false);
      } else {
        buffer = emit.transient(BufferRole::unsharded_weight, unit, -1, mb,
                                c.fp8_param_gather ? DType::fp8_e4m3 : c.param_dtype,
                                unsharded_bytes(unit, gather_bytes, false),
                                fmt::format("unsharded_weight{} {} mb{}", backward ? ".bwd" : "",
                                            unit_label(plan, unit), mb));
      }
      (backward ? unsharded_bwd : unsharded_fwd)[static_cast<std::size_t>(unit)] = buffer;
      const int64_t id =
          emit.op(PlanOp{.stream = Stream::ag,
                         .kind = OpKind::all_gather,
                         .unit = unit,
                         .micro_batch = mb,
                         .name = fmt::format("{} {} mb{}", backward ? "ag_bwd" : "ag_fwd",
                                             unit_label(plan, unit), mb),
                         .bytes = unsharded_bytes(unit, gather_bytes, false),
                         .group = shard_group,
                         .deps = std::move(deps),
                         .reads = weights[static_cast<std::size_t>(unit)],
                         .writes = {buffer}});
      (backward ? ag_bwd : ag_fwd)[static_cast<std::size_t>(unit)] = id;
    };

    // ---- forward
    const int64_t kf = c.forward_prefetch;
    const int64_t num_layers = static_cast<int64_t>(layers.size());
    const std::vector<int64_t> start_deps = next_start_deps;
    if (gather_root) gather(0, false, -1, start_deps);
    if (s.shard_params) {
      for (int64_t i = 0; i <= std::min(kf, num_layers - 1); ++i)
        gather(layers[static_cast<std::size_t>(i)], false, i, start_deps);
    }
    int64_t layer_index = 0;
    int64_t last_forward = -1;
    std::vector<int64_t> activations(plan.segments.size(), -1);
    for (const PlanSegment& seg : plan.segments) {
      const auto u = static_cast<std::size_t>(seg.unit);
      activations[static_cast<std::size_t>(seg.id)] =
          emit.transient(BufferRole::activations, seg.unit, -1, mb, c.param_dtype,
                         seg.activation_bytes, fmt::format("activations {} mb{}", seg.label, mb));
      std::vector<int64_t> deps;
      std::vector<int64_t> reads;
      if (s.shard_params && (seg.unit != 0 || gather_root)) {
        deps.push_back(ag_fwd[u]);
        reads.push_back(unsharded_fwd[u]);
      } else {
        reads = weights[u];
      }
      if (last_forward >= 0) {
        deps.push_back(last_forward);
      } else {
        deps.insert(deps.end(), start_deps.begin(), start_deps.end());
      }
      std::vector<int64_t> writes = {activations[static_cast<std::size_t>(seg.id)]};
      // keep_fp8_transpose_cache: the transposed FP8 weights stay from forward to backward.
      if (c.keep_fp8_transpose_cache && seg.unit != 0) {
        transpose_cache[u] =
            emit.transient(BufferRole::fp8_transpose_cache, seg.unit, -1, mb, DType::fp8_e4m3,
                           unsharded_bytes(seg.unit, 1.0, false),
                           fmt::format("fp8_transpose_cache {} mb{}", seg.label, mb));
        writes.push_back(transpose_cache[u]);
      }
      last_forward = emit.op(PlanOp{.stream = Stream::compute,
                                    .kind = OpKind::forward,
                                    .unit = seg.unit,
                                    .segment = seg.id,
                                    .micro_batch = mb,
                                    .name = fmt::format("fwd {} mb{}", seg.label, mb),
                                    .bytes = seg.io_bytes,
                                    .flops = seg.forward_flops,
                                    .attention_flops = seg.forward_attention_flops,
                                    .deps = std::move(deps),
                                    .reads = std::move(reads),
                                    .writes = std::move(writes)});
      if (seg.unit != 0) {
        const int64_t next = layer_index + kf + 1;
        if (s.shard_params && next < num_layers) {
          gather(layers[static_cast<std::size_t>(next)], false, next, {last_forward});
        }
        ++layer_index;
      }
    }

    // ---- backward
    const int64_t kb = c.backward_prefetch;
    const int64_t drain = c.async_reduce ? c.max_live_grad_buffers : 1;
    std::vector<int64_t> backward_layers(layers.rbegin(), layers.rend());
    if (s.shard_params) {
      for (int64_t j = 0; j <= std::min(kb, num_layers - 1); ++j) {
        gather(backward_layers[static_cast<std::size_t>(j)], true, num_layers - 1 - j,
               {last_forward});
      }
    }
    auto reduce = [&](int64_t unit, std::vector<int64_t> deps) {
      const auto u = static_cast<std::size_t>(unit);
      const bool all_reduce = s.all_reduce_grads;
      std::vector<int64_t> reads =
          s.shard_grads ? std::vector<int64_t>{unsharded_grad[u]} : main_grads[u];
      const int64_t id = emit.op(PlanOp{
          .stream = c.async_reduce ? Stream::rs : Stream::compute,
          .kind = all_reduce ? OpKind::all_reduce : OpKind::reduce_scatter,
          .unit = unit,
          .micro_batch = mb,
          .name = fmt::format("{} {} mb{}", all_reduce ? "ar" : "rs", unit_label(plan, unit), mb),
          .bytes = unsharded_bytes(unit, grad_bytes, true),
          .group = shard_group,
          .deps = std::move(deps),
          .reads = std::move(reads),
          .writes = main_grads[u]});
      rs_op[u] = id;
      last_reduce[u] = id;
      if (s.hsdp && mb == last_mb) {
        const bool outer_rs = s.outer_optimizer;
        last_reduce[u] =
            emit.op(PlanOp{.stream = Stream::outer,
                           .kind = outer_rs ? OpKind::reduce_scatter : OpKind::all_reduce,
                           .unit = unit,
                           .micro_batch = mb,
                           .name = fmt::format("{} {}", outer_rs ? "outer_rs" : "outer_ar",
                                               unit_label(plan, unit)),
                           .bytes = all_reduce ? unsharded_bytes(unit, grad_bytes, true)
                                               : unsharded_bytes(unit, grad_bytes, true) /
                                                     static_cast<double>(c.dp_shard),
                           .group = outer_group,
                           .deps = {id},
                           .reads = main_grads[u],
                           .writes = main_grads[u]});
      }
    };

    int64_t backward_index = 0;
    int64_t last_backward = -1;
    std::vector<int64_t> backward_order_rs;  // reduce op per backward position
    for (auto it = plan.segments.rbegin(); it != plan.segments.rend(); ++it) {
      const PlanSegment& seg = *it;
      const auto u = static_cast<std::size_t>(seg.unit);
      const bool layer = seg.unit != 0;
      std::vector<int64_t> reads = {activations[static_cast<std::size_t>(seg.id)]};
      if (transpose_cache[u] >= 0) reads.push_back(transpose_cache[u]);
      std::vector<int64_t> deps = {last_backward >= 0 ? last_backward : last_forward};
      if (s.shard_params && (layer || gather_root)) {
        const int64_t weight = layer ? unsharded_bwd[u] : unsharded_fwd[u];
        reads.push_back(weight);
        if (layer) deps.push_back(ag_bwd[u]);
      } else {
        reads.insert(reads.end(), weights[u].begin(), weights[u].end());
      }
      if (layer && c.recompute == Recompute::full && seg.checkpointed) {
        const int64_t recomputed = emit.transient(
            BufferRole::recompute_activations, seg.unit, -1, mb, c.param_dtype,
            seg.full_activation_bytes, fmt::format("recompute_activations {} mb{}", seg.label, mb));
        const int64_t rc = emit.op(PlanOp{.stream = Stream::compute,
                                          .kind = OpKind::recompute,
                                          .unit = seg.unit,
                                          .segment = seg.id,
                                          .micro_batch = mb,
                                          .name = fmt::format("recompute {} mb{}", seg.label, mb),
                                          .bytes = seg.io_bytes,
                                          .flops = seg.forward_flops,
                                          .attention_flops = seg.forward_attention_flops,
                                          .deps = deps,
                                          .reads = reads,
                                          .writes = {recomputed}});
        deps.push_back(rc);
        reads.push_back(recomputed);
      }
      // The sliding drain: wait for the reduction `drain` layers back.
      if (layer && s.shard_grads && has_grads(seg.unit) && backward_index >= drain) {
        const int64_t waited = backward_order_rs[static_cast<std::size_t>(backward_index - drain)];
        if (waited >= 0) deps.push_back(waited);
      }
      std::vector<int64_t> writes;
      if (s.shard_grads && has_grads(seg.unit)) {
        if (unsharded_grad[u] < 0) {
          unsharded_grad[u] =
              double_buffered && layer
                  ? double_buffer_for(num_layers - 1 - backward_index, true)
                  : emit.transient(
                        BufferRole::unsharded_grad, seg.unit, -1, mb, c.grad_reduce_dtype,
                        unsharded_bytes(seg.unit, grad_bytes, true),
                        fmt::format("unsharded_grad {} mb{}", unit_label(plan, seg.unit), mb));
        }
        writes.push_back(unsharded_grad[u]);
      } else {
        writes = main_grads[u];
      }
      last_backward = emit.op(PlanOp{.stream = Stream::compute,
                                     .kind = OpKind::backward,
                                     .unit = seg.unit,
                                     .segment = seg.id,
                                     .micro_batch = mb,
                                     .name = fmt::format("bwd {} mb{}", seg.label, mb),
                                     .bytes = 2.0 * seg.io_bytes,
                                     .flops = seg.backward_flops,
                                     .attention_flops = seg.backward_attention_flops,
                                     .deps = std::move(deps),
                                     .reads = std::move(reads),
                                     .writes = std::move(writes)});
      if (layer) {
        const int64_t next = backward_index + kb + 1;
        if (s.shard_params && next < num_layers) {
          gather(backward_layers[static_cast<std::size_t>(next)], true, num_layers - 1 - next,
                 {last_backward});
        }
        if (reduce_now && has_grads(seg.unit)) {
          reduce(seg.unit, {last_backward});
          backward_order_rs.push_back(rs_op[u]);
        } else {
          backward_order_rs.push_back(-1);
        }
        ++backward_index;
      }
    }
    // The root's final callback reduces the root unit, whose last gradient (the
    // embedding's) is produced last.
    if (reduce_now && has_grads(0)) reduce(0, {last_backward});
    // The root's final callback waits for every reduction still in flight, so the next
    // micro-batch (or the optimizer step) starts with none pending.
    next_start_deps.assign(1, last_backward);
    for (int64_t r : rs_op) {
      if (r >= 0) next_start_deps.push_back(r);
    }
  }

  // ---- optimizer step
  std::vector<int64_t> step_deps;
  std::vector<int64_t> step_reads, step_writes;
  for (std::size_t u = 0; u < num_units; ++u) {
    if (last_reduce[u] >= 0) step_deps.push_back(last_reduce[u]);
    step_reads.insert(step_reads.end(), main_grads[u].begin(), main_grads[u].end());
    step_reads.insert(step_reads.end(), optimizer[u].begin(), optimizer[u].end());
    step_writes.insert(step_writes.end(), optimizer[u].begin(), optimizer[u].end());
    step_writes.insert(step_writes.end(), weights[u].begin(), weights[u].end());
  }
  double optimizer_bytes = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.persistent &&
        (b.role == BufferRole::main_weight || b.role == BufferRole::optimizer_state ||
         b.role == BufferRole::main_grad)) {
      optimizer_bytes += 2.0 * static_cast<double>(b.bytes);  // read and write back
    }
  }
  const int64_t step = emit.op(PlanOp{.stream = Stream::compute,
                                      .kind = OpKind::optimizer_step,
                                      .name = "optimizer_step",
                                      .bytes = optimizer_bytes,
                                      .deps = std::move(step_deps),
                                      .reads = std::move(step_reads),
                                      .writes = std::move(step_writes)});
  free_after_waiters(plan);
  // ZeRO-1/2 keep full weights: gather the updated shards back into them.
  const bool post_gather = s.post_step_gather;
  for (std::size_t u = 0; u < num_units; ++u) {
    const auto unit = static_cast<int64_t>(u);
    if (!has_grads(unit)) continue;
    if (s.outer_optimizer && s.hsdp) {
      emit.op(PlanOp{
          .stream = Stream::outer,
          .kind = OpKind::all_gather,
          .unit = unit,
          .name = fmt::format("outer_ag {}", unit_label(plan, unit)),
          .bytes = unsharded_bytes(unit, static_cast<double>(dtype_bytes(c.param_dtype)), true) /
                   static_cast<double>(c.dp_shard),
          .group = outer_group,
          .deps = {step},
          .reads = optimizer[u],
          .writes = weights[u]});
    }
    if (post_gather) {
      emit.op(PlanOp{
          .stream = Stream::ag,
          .kind = OpKind::all_gather,
          .unit = unit,
          .name = fmt::format("ag_post {}", unit_label(plan, unit)),
          .bytes = unsharded_bytes(unit, static_cast<double>(dtype_bytes(c.param_dtype)), true),
          .group = shard_group,
          .deps = {step},
          .reads = optimizer[u],
          .writes = weights[u]});
    }
  }
}

}  // namespace shardplan
