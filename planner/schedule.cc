#include "planner/internal/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "models/host_work.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

// Appends ops in a valid topological order and records, per transient buffer, the first
// and last op that touch it.
class Emitter {
 public:
  explicit Emitter(Plan& plan) : plan_(plan) {}

  int64_t op(PlanOp o) {
    o.id = static_cast<int64_t>(plan_.ops.size());
    // The host issues each collective as one op (c10d's call, NCCL's launch); inside a
    // full-iteration CUDA graph as one node of it.
    if (is_collective(o.kind)) {
      o.host_seconds = plan_.config.cuda_graphs.has(CudaGraphScope::full_iteration)
                           ? kGraphNodeSeconds
                           : kHostOpSeconds;
    }
    std::sort(o.deps.begin(), o.deps.end());
    o.deps.erase(std::unique(o.deps.begin(), o.deps.end()), o.deps.end());
    for (int64_t b : o.reads) touch(b, o.id);
    for (int64_t b : o.writes) touch(b, o.id);
    plan_.ops.push_back(std::move(o));
    return plan_.ops.back().id;
  }

  int64_t transient(BufferRole role, int64_t unit, int64_t micro_batch, DType dtype, double bytes,
                    std::string name) {
    plan_.buffers.push_back(PlanBuffer{.id = static_cast<int64_t>(plan_.buffers.size()),
                                       .role = role,
                                       .unit = unit,
                                       .group = -1,
                                       .micro_batch = micro_batch,
                                       .dtype = dtype,
                                       .bytes = static_cast<int64_t>(bytes),
                                       .persistent = false,
                                       .live_begin = -1,
                                       .live_end = -1,
                                       .name = std::move(name)});
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

// A unit's parameters fall in up to two shard domains, gathered and reduced apart: the
// dense ones over dp_shard × cp, and routed experts on an expert mesh over edp.
constexpr int kDense = 0, kExperts = 1;
constexpr std::array<int, 2> kDomains = {kDense, kExperts};

// A unit's persistent buffers, by what reads or writes them, and by domain.
struct UnitBuffers {
  std::vector<int64_t> weights;     // model weights (and MXFP8's column-wise copy)
  std::vector<int64_t> main_grads;  // gradients the reductions land in
  std::vector<int64_t> optimizer;   // main weights and optimizer states
  std::array<std::vector<int64_t>, 2> weights_of, main_grads_of, optimizer_of;
};

// What one micro-batch's forward leaves for its backward, per unit (ops and buffers; -1
// where none).
struct MicroBatchState {
  explicit MicroBatchState(std::size_t units, std::size_t segments)
      : ag_fwd(units, -1),
        ag_bwd(units, -1),
        reduce(units, -1),
        unsharded_fwd(units),
        unsharded_bwd(units),
        unsharded_grad(units, {-1, -1}),
        transpose_cache(units, -1),
        activations(segments, -1),
        offload(segments, -1),
        reload(segments, -1),
        reloaded(segments, -1) {}
  std::vector<int64_t> ag_fwd, ag_bwd, reduce;  // the unit's last gather (reduction) op
  std::vector<std::vector<int64_t>> unsharded_fwd, unsharded_bwd;  // a buffer per domain
  std::vector<std::array<int64_t, 2>> unsharded_grad;              // per domain, -1: none
  std::vector<int64_t> transpose_cache;
  std::vector<int64_t> activations;  // per segment
  // offload_activations, per segment: the copy to host, the copy back, and its buffer.
  std::vector<int64_t> offload, reload, reloaded;
  int64_t last_forward = -1;
};

class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(Plan& plan)
      : plan_(plan),
        c_(plan.config),
        s_(sharding_traits(plan.config)),
        torch_layout_(torch_fsdp_layout(plan.config)),
        emit_(plan),
        shard_group_(find_process_group(plan, "dp_shard_cp")),
        outer_group_(find_process_group(plan, "dp_outer")),
        domain_groups_{shard_group_, find_process_group(plan, "edp")},
        axis_groups_(axis_groups(plan)),
        gather_bytes_(c_.fp8_param_gather ? 1.0 : static_cast<double>(dtype_bytes(c_.param_dtype))),
        grad_bytes_(static_cast<double>(dtype_bytes(c_.grad_reduce_dtype))),
        units_(plan.units.size()),
        last_reduce_(plan.units.size(), -1),
        accumulated_(plan.units.size(), {-1, -1}) {
    index_persistent_buffers();
    // Layer units in forward order (every unit but the root owns exactly one segment).
    for (const PlanSegment& seg : plan_.segments) {
      if (seg.unit != 0) {
        layers_.push_back(seg.unit);
        layer_segments_.push_back(seg.id);
      }
    }
    double_buffered_ = c_.double_buffer && !double_buffers_.empty();
    // PyTorch FSDP computes gradients in param_dtype and casts them into a reduce_dtype
    // reduce-scatter input when it reduces (FSDP2's foreach_reduce copy-in).
    cast_grads_ = torch_layout_ && !double_buffered_ &&
                  dtype_bytes(c_.param_dtype) < dtype_bytes(c_.grad_reduce_dtype);
    // The root unit is gathered when it has parameters and work of its own: a captured
    // model's root may hold nothing outside its units (nn.TransformerEncoder).
    gather_root_ = s_.shard_params && unsharded_bytes(0, 1.0, false) > 0 &&
                   std::any_of(plan_.segments.begin(), plan_.segments.end(),
                               [](const PlanSegment& seg) { return seg.unit == 0; });
  }

  void emit_forward(int64_t mb);
  void emit_backward(int64_t mb);
  void emit_optimizer_step();
  void emit_post_step_gathers();

 private:
  void index_persistent_buffers();
  // A unit's parameters at `element_bytes` each: all of them, or one domain's.
  double unsharded_bytes(int64_t unit, double element_bytes, bool trainable_only,
                         int domain = -1) const;
  // The process group a model-parallel collective runs over, by MeshAxis.
  static std::array<int64_t, kNumMeshAxes> axis_groups(const Plan& plan);
  bool has_grads(int64_t unit) const { return unsharded_bytes(unit, 1.0, true) > 0; }
  double shard_ranks() const {
    return static_cast<double>(plan_.process_groups[static_cast<std::size_t>(shard_group_)].size);
  }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Double buffering: layer units alternate between two persistent buffers per role.
  int64_t double_buffer_for(int64_t layer_index, bool grad) const {
    return double_buffers_[static_cast<std::size_t>((grad ? 2 : 0) + layer_index % 2)];
  }
  void gather(int64_t unit, bool backward, int64_t layer_index, std::vector<int64_t> deps);
  int64_t emit_backward_of(const PlanSegment& seg, int64_t position, int64_t last_backward,
                           const std::vector<int64_t>& reduce_by_position);
  void reduce(int64_t unit, std::vector<int64_t> deps);
  // offload_activations: the layer at forward `index` back from host, once `after` ends.
  void reload_layer(int64_t index, int64_t after);
  // A segment's forward work as an op: the forward, or its re-run under full recompute.
  PlanOp forward_work(const PlanSegment& seg, OpKind kind, std::vector<int64_t> deps,
                      std::vector<int64_t> reads, std::vector<int64_t> writes) const {
    return PlanOp{.stream = Stream::compute,
                  .kind = kind,
                  .unit = seg.unit,
                  .segment = seg.id,
                  .micro_batch = mb_,
                  .name = fmt::format("{} {} mb{}", kind == OpKind::forward ? "fwd" : "recompute",
                                      seg.label, mb_),
                  .bytes = seg.io_bytes + seg.fp8_cast_forward_bytes,
                  .flops = seg.forward_flops,
                  .attention_flops = seg.forward_attention_flops,
                  .bf16_gemm_flops = seg.forward_bf16_gemm_flops,
                  .deps = std::move(deps),
                  .reads = std::move(reads),
                  .writes = std::move(writes),
                  .host_seconds = seg.forward_host_seconds,
                  .host_sync = seg.host_sync};
  }
  void reduce_outer(int64_t unit, int64_t inner_reduce);
  // What a segment's compute op holds while it runs and frees when it ends.
  int64_t workspace(const PlanSegment& seg, int64_t mb, std::string_view pass) {
    return emit_.transient(BufferRole::workspace, seg.unit, mb, c_.param_dtype, seg.workspace_bytes,
                           fmt::format("workspace {} {} mb{}", pass, seg.label, mb));
  }
  int64_t emit_work(PlanOp work, const PlanSegment& seg, const std::vector<SegmentComm>& comms,
                    std::string_view pass);

  Plan& plan_;
  const FsdpConfig& c_;
  const ShardingTraits s_;
  const bool torch_layout_;  // PyTorch FSDP's parameter layout (fsdp_config.h)
  Emitter emit_;
  const int64_t shard_group_, outer_group_;
  const std::array<int64_t, 2> domain_groups_;  // the group each domain shards over
  const std::array<int64_t, kNumMeshAxes> axis_groups_;
  const double gather_bytes_, grad_bytes_;
  std::vector<UnitBuffers> units_;
  std::vector<int64_t> double_buffers_;
  std::vector<int64_t> layers_;
  std::vector<int64_t> layer_segments_;  // the segment of each layer unit, forward order
  bool double_buffered_ = false;
  bool cast_grads_ = false;
  bool gather_root_ = false;
  std::vector<int64_t> last_reduce_;  // final reduction op per unit
  // no_sync: per unit and domain, the gradients summed across micro-batches (-1 until the
  // first backward makes them).
  std::vector<std::array<int64_t, 2>> accumulated_;
  std::vector<int64_t> next_start_deps_;  // what the next micro-batch (or the step) waits for
  int64_t mb_ = 0;
  MicroBatchState state_{0, 0};
  int64_t step_ = -1;  // the optimizer step
  // Overlapped model-parallel collectives the next compute op waits for.
  std::vector<int64_t> pending_side_;
  std::vector<int64_t> backward_side_;  // ... still running when the last backward ends
};

std::string_view comm_short_name(OpKind kind) {
  switch (kind) {
    case OpKind::all_gather:
      return "ag";
    case OpKind::reduce_scatter:
      return "rs";
    case OpKind::all_reduce:
      return "ar";
    case OpKind::send_recv:
      return "p2p";
    case OpKind::all_to_all:
      return "a2a";
    default:
      return "?";
  }
}

// A segment's compute op with its tensor- and context-parallel collectives (seg.*_comms).
// Blocking ones run on the compute stream just before the compute op, so the segment takes
// their time plus its own. Overlapped ones (ring attention's steps; tensor-parallel ones
// under tp_comm_overlap, which Transformer Engine pipelines with the GEMMs they feed; on
// the PyTorch stacks AsyncTP's, in forward only) run
// on their own stream from when the compute op may start, slowing it while they run (the
// simulator's overlap cost), and the next compute op waits for them: the segment takes
// the longer of the two. One transient buffer per axis and pass holds the largest message
// (Megatron reuses one global buffer for sequence-parallel gathers).
int64_t ScheduleBuilder::emit_work(PlanOp work, const PlanSegment& seg,
                                   const std::vector<SegmentComm>& comms, std::string_view pass) {
  work.deps.insert(work.deps.end(), pending_side_.begin(), pending_side_.end());
  pending_side_.clear();
  if (comms.empty()) return emit_.op(std::move(work));
  // A host sync comes before the segment's first op: its collectives run ahead of it.
  bool host_sync = work.host_sync;
  work.host_sync = false;
  // One buffer per role (tp, ep, cp), sized for its largest collective.
  constexpr std::array<BufferRole, 3> kRoles = {BufferRole::tp_buffer, BufferRole::ep_buffer,
                                                BufferRole::cp_buffer};
  auto role_index = [&](MeshAxis axis) {
    return static_cast<std::size_t>(
        std::find(kRoles.begin(), kRoles.end(), comm_buffer_role(axis)) - kRoles.begin());
  };
  std::array<double, kRoles.size()> role_bytes{};
  for (const SegmentComm& c : comms) {
    double& bytes = role_bytes[role_index(c.axis)];
    bytes = std::max(bytes, comm_buffer_bytes(c.kind, c.bytes));
  }
  std::array<int64_t, kRoles.size()> buffers{-1, -1, -1};
  for (std::size_t i = 0; i < kRoles.size(); ++i) {
    if (role_bytes[i] <= 0) continue;  // no bytes to hold
    buffers[i] = emit_.transient(
        kRoles[i], seg.unit, mb_, c_.param_dtype, role_bytes[i],
        fmt::format("{} {} {} mb{}", buffer_role_name(kRoles[i]), pass, seg.label, mb_));
    work.reads.push_back(buffers[i]);
  }
  const std::vector<int64_t> start_deps = work.deps;
  // Transformer Engine's userbuffers pipeline the sequence-parallel collectives of forward
  // and backward; PyTorch's AsyncTP fuses those of the forward graph ("up to ~20% forward
  // pass speedup", Introducing Async Tensor Parallelism in PyTorch, discuss.pytorch.org).
  const bool tp_overlap = c_.tp_comm_overlap && (c_.stack == Stack::megatron_te || pass == "fwd");
  for (const SegmentComm& c : comms) {
    const bool cp = c.axis == MeshAxis::cp;
    // MoE dispatch and combine block the compute stream (Megatron runs them in line).
    const bool overlapped =
        cp ? c.kind == CommKind::send_recv : c.axis == MeshAxis::tp && tp_overlap;
    const int64_t buffer = buffers[role_index(c.axis)];
    const std::vector<int64_t> writes =
        buffer < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{buffer};
    for (int64_t step = 0; step < c.count; ++step) {
      const int64_t id =
          emit_.op(PlanOp{.stream = overlapped ? (cp ? Stream::cp : Stream::tp) : Stream::compute,
                          .kind = op_kind_of(c.kind),
                          .unit = seg.unit,
                          .micro_batch = mb_,
                          .name = fmt::format("{}_{} {} {} mb{}{}", mesh_axis_name(c.axis),
                                              comm_short_name(op_kind_of(c.kind)), pass, c.module,
                                              mb_, c.count > 1 ? fmt::format(" step{}", step) : ""),
                          .bytes = c.bytes,
                          .group = axis_groups_[static_cast<std::size_t>(c.axis)],
                          .deps = start_deps,
                          .writes = writes,
                          .host_sync = host_sync});
      host_sync = false;
      (overlapped ? pending_side_ : work.deps).push_back(id);
    }
  }
  return emit_.op(std::move(work));
}

std::array<int64_t, kNumMeshAxes> ScheduleBuilder::axis_groups(const Plan& plan) {
  // Without an expert mesh the experts are split as the dense layers are: their
  // tensor-parallel group is tp.
  const bool mesh = expert_mesh(plan.config);
  std::array<int64_t, kNumMeshAxes> groups{};
  groups[static_cast<std::size_t>(MeshAxis::tp)] = find_process_group(plan, "tp");
  groups[static_cast<std::size_t>(MeshAxis::cp)] = find_process_group(plan, "cp");
  groups[static_cast<std::size_t>(MeshAxis::ep)] = find_process_group(plan, mesh ? "ep" : "tp");
  groups[static_cast<std::size_t>(MeshAxis::etp)] = find_process_group(plan, mesh ? "etp" : "tp");
  groups[static_cast<std::size_t>(MeshAxis::ep_etp)] =
      find_process_group(plan, mesh ? "ep_etp" : "tp");
  return groups;
}

void ScheduleBuilder::index_persistent_buffers() {
  for (const PlanBuffer& b : plan_.buffers) {
    // PyTorch FSDP's main grads are transient (torch_fsdp_layout) but belong to their unit.
    if (!b.persistent && b.role != BufferRole::main_grad) continue;
    if (b.role == BufferRole::double_buffer) {
      double_buffers_.push_back(b.id);
      continue;
    }
    if (b.unit < 0) continue;
    UnitBuffers& u = units_[static_cast<std::size_t>(b.unit)];
    const auto domain = static_cast<std::size_t>(
        b.group >= 0 && plan_.groups[static_cast<std::size_t>(b.group)].expert ? kExperts : kDense);
    if (b.role == BufferRole::model_weight || b.role == BufferRole::fp8_columnwise_weight) {
      u.weights.push_back(b.id);
      u.weights_of[domain].push_back(b.id);
    } else if (b.role == BufferRole::main_grad) {
      u.main_grads.push_back(b.id);
      u.main_grads_of[domain].push_back(b.id);
    } else if (b.role == BufferRole::main_weight || b.role == BufferRole::optimizer_state) {
      u.optimizer.push_back(b.id);
      u.optimizer_of[domain].push_back(b.id);
    }
  }
}

double ScheduleBuilder::unsharded_bytes(int64_t unit, double element_bytes, bool trainable_only,
                                        int domain) const {
  double total = 0;
  for (int64_t g : plan_.units[static_cast<std::size_t>(unit)].groups) {
    const ParamGroup& group = plan_.groups[static_cast<std::size_t>(g)];
    if (trainable_only && !group.requires_grad) continue;
    if (domain >= 0 && static_cast<int>(group.expert) != domain) continue;
    total += static_cast<double>(group.padded_elements) * element_bytes;
  }
  return total;
}

// One all-gather per domain the unit has parameters in (the experts' after the dense
// ones', on the same stream), each into a buffer of its own; the unit's last one stands
// for both, as it depends on the first. The dense one is always issued (0 bytes for a
// unit without parameters), so every unit has a gather to wait for.
void ScheduleBuilder::gather(int64_t unit, bool backward, int64_t layer_index,
                             std::vector<int64_t> deps) {
  const auto u = static_cast<std::size_t>(unit);
  std::vector<int64_t>& buffers = (backward ? state_.unsharded_bwd : state_.unsharded_fwd)[u];
  int64_t& last = (backward ? state_.ag_bwd : state_.ag_fwd)[u];
  buffers.clear();
  last = -1;
  for (int domain : kDomains) {
    const double bytes = unsharded_bytes(unit, gather_bytes_, false, domain);
    if (domain == kExperts && units_[u].weights_of[kExperts].empty()) continue;
    const char* what = domain == kExperts ? " experts" : "";
    int64_t buffer;
    if (double_buffered_ && unit != 0) {
      buffer = double_buffer_for(layer_index, false);
    } else {
      buffer = emit_.transient(BufferRole::unsharded_weight, unit, mb_,
                               c_.fp8_param_gather ? DType::fp8_e4m3 : c_.param_dtype, bytes,
                               fmt::format("unsharded_weight{} {}{} mb{}", backward ? ".bwd" : "",
                                           unit_label(plan_, unit), what, mb_));
    }
    buffers.push_back(buffer);
    std::vector<int64_t> op_deps = deps;
    if (last >= 0) op_deps.push_back(last);
    last = emit_.op(PlanOp{.stream = Stream::ag,
                           .kind = OpKind::all_gather,
                           .unit = unit,
                           .micro_batch = mb_,
                           .name = fmt::format("{} {}{} mb{}", backward ? "ag_bwd" : "ag_fwd",
                                               unit_label(plan_, unit), what, mb_),
                           .bytes = bytes,
                           .group = domain_groups_[static_cast<std::size_t>(domain)],
                           .deps = std::move(op_deps),
                           .reads = units_[u].weights_of[static_cast<std::size_t>(domain)],
                           .writes = {buffer}});
  }
}

void ScheduleBuilder::emit_forward(int64_t mb) {
  mb_ = mb;
  state_ = MicroBatchState(plan_.units.size(), plan_.segments.size());
  const int64_t kf = c_.forward_prefetch;
  const std::vector<int64_t> start_deps = next_start_deps_;
  if (gather_root_) gather(0, false, -1, start_deps);
  int64_t next_gather = 0;  // the next layer position to gather
  auto gather_triggered_by = [&](int64_t position, const std::vector<int64_t>& deps) {
    for (; s_.shard_params && next_gather < num_layers() &&
           gather_trigger(next_gather, kf) == position;
         ++next_gather) {
      gather(layers_[static_cast<std::size_t>(next_gather)], false, next_gather, deps);
    }
  };
  gather_triggered_by(-1, start_deps);
  int64_t position = 0;
  int64_t offload_wait = -1;  // the copy the next compute op waits for
  for (const PlanSegment& seg : plan_.segments) {
    const auto u = static_cast<std::size_t>(seg.unit);
    const UnitBuffers& unit = units_[u];
    const int64_t activations =
        emit_.transient(BufferRole::activations, seg.unit, mb, c_.param_dtype, seg.activation_bytes,
                        fmt::format("activations {} mb{}", seg.label, mb));
    state_.activations[static_cast<std::size_t>(seg.id)] = activations;
    std::vector<int64_t> deps;
    std::vector<int64_t> reads;
    if (s_.shard_params && (seg.unit != 0 || gather_root_)) {
      deps.push_back(state_.ag_fwd[u]);
      reads = state_.unsharded_fwd[u];
    } else {
      reads = unit.weights;
    }
    if (state_.last_forward >= 0) {
      deps.push_back(state_.last_forward);
    } else {
      deps.insert(deps.end(), start_deps.begin(), start_deps.end());
    }
    if (offload_wait >= 0) deps.push_back(offload_wait);
    offload_wait = -1;
    std::vector<int64_t> writes = {activations};
    if (seg.workspace_bytes > 0) writes.push_back(workspace(seg, mb, "fwd"));
    // keep_fp8_transpose_cache: the transposed FP8 weights stay from forward to backward.
    if (c_.keep_fp8_transpose_cache && seg.unit != 0) {
      state_.transpose_cache[u] =
          emit_.transient(BufferRole::fp8_transpose_cache, seg.unit, mb, DType::fp8_e4m3,
                          unsharded_bytes(seg.unit, 1.0, false),
                          fmt::format("fp8_transpose_cache {} mb{}", seg.label, mb));
      writes.push_back(state_.transpose_cache[u]);
    }
    state_.last_forward = emit_work(
        forward_work(seg, OpKind::forward, std::move(deps), std::move(reads), std::move(writes)),
        seg, seg.forward_comms, "fwd");
    if (seg.unit == 0) continue;
    // Transformer Engine's offload handler: the layer's saved tensors go to host on their
    // own stream once its forward ends; at the end of the next layer's forward the compute
    // stream waits for that copy and frees them (num_offload_sync_layers 1).
    if (position > 0) {
      offload_wait = state_.offload[static_cast<std::size_t>(
          layer_segments_[static_cast<std::size_t>(position - 1)])];
    }
    if (position < c_.offload_activations) {
      state_.offload[static_cast<std::size_t>(seg.id)] =
          emit_.op(PlanOp{.stream = Stream::d2h,
                          .kind = OpKind::offload,
                          .unit = seg.unit,
                          .segment = seg.id,
                          .micro_batch = mb,
                          .name = fmt::format("offload {} mb{}", seg.label, mb),
                          .bytes = seg.activation_bytes,
                          .deps = {state_.last_forward},
                          .reads = {activations}});
    }
    gather_triggered_by(position++, {state_.last_forward});
  }
}

// One reduction per domain the unit has gradients in (the experts' after the dense ones',
// depending on it), each over its own group.
void ScheduleBuilder::reduce(int64_t unit, std::vector<int64_t> deps) {
  const auto u = static_cast<std::size_t>(unit);
  const bool all_reduce = s_.all_reduce_grads;
  int64_t id = -1;
  for (int domain : kDomains) {
    const auto d = static_cast<std::size_t>(domain);
    const double bytes = unsharded_bytes(unit, grad_bytes_, true, domain);
    if (units_[u].main_grads_of[d].empty()) continue;
    const char* what = domain == kExperts ? " experts" : "";
    std::vector<int64_t> reads = !s_.shard_grads ? units_[u].main_grads_of[d]
                                 : c_.no_sync    ? std::vector<int64_t>{accumulated_[u][d]}
                                              : std::vector<int64_t>{state_.unsharded_grad[u][d]};
    std::vector<int64_t> writes = units_[u].main_grads_of[d];
    if (cast_grads_ && s_.shard_grads) {
      // The reduce-scatter's input, written by its copy-in and held until it ends.
      writes.insert(writes.begin(),
                    emit_.transient(
                        BufferRole::unsharded_grad, unit, mb_, c_.grad_reduce_dtype, bytes,
                        fmt::format("reduce_input {}{} mb{}", unit_label(plan_, unit), what, mb_)));
    }
    std::vector<int64_t> op_deps = deps;
    if (id >= 0) op_deps.push_back(id);
    id = emit_.op(PlanOp{.stream = c_.async_reduce ? Stream::rs : Stream::compute,
                         .kind = all_reduce ? OpKind::all_reduce : OpKind::reduce_scatter,
                         .unit = unit,
                         .micro_batch = mb_,
                         .name = fmt::format("{} {}{} mb{}", all_reduce ? "ar" : "rs",
                                             unit_label(plan_, unit), what, mb_),
                         .bytes = bytes,
                         .group = domain_groups_[d],
                         .deps = std::move(op_deps),
                         .reads = std::move(reads),
                         .writes = std::move(writes)});
  }
  state_.reduce[u] = id;
  last_reduce_[u] = id;
  if (s_.hsdp && mb_ == c_.grad_accum - 1) reduce_outer(unit, id);
}

void ScheduleBuilder::reload_layer(int64_t index, int64_t after) {
  const int64_t segment = layer_segments_[static_cast<std::size_t>(index)];
  const auto s = static_cast<std::size_t>(segment);
  const PlanSegment& seg = plan_.segments[s];
  state_.reloaded[s] = emit_.transient(BufferRole::reloaded_activations, seg.unit, mb_,
                                       c_.param_dtype, seg.activation_bytes,
                                       fmt::format("reloaded_activations {} mb{}", seg.label, mb_));
  state_.reload[s] = emit_.op(PlanOp{.stream = Stream::h2d,
                                     .kind = OpKind::reload,
                                     .unit = seg.unit,
                                     .segment = segment,
                                     .micro_batch = mb_,
                                     .name = fmt::format("reload {} mb{}", seg.label, mb_),
                                     .bytes = seg.activation_bytes,
                                     .deps = {after, state_.offload[s]},
                                     .writes = {state_.reloaded[s]}});
}

// HSDP: the replicas reduce the step's gradients across dp_outer, once, after the last
// micro-batch's reduction over dp_shard.
void ScheduleBuilder::reduce_outer(int64_t unit, int64_t inner_reduce) {
  const auto u = static_cast<std::size_t>(unit);
  const bool outer_rs = s_.outer_optimizer;
  const double grads = unsharded_bytes(unit, grad_bytes_, true);
  last_reduce_[u] = emit_.op(PlanOp{
      .stream = Stream::outer,
      .kind = outer_rs ? OpKind::reduce_scatter : OpKind::all_reduce,
      .unit = unit,
      .micro_batch = mb_,
      .name = fmt::format("{} {}", outer_rs ? "outer_rs" : "outer_ar", unit_label(plan_, unit)),
      .bytes = s_.all_reduce_grads ? grads : grads / shard_ranks(),
      .group = outer_group_,
      .deps = {inner_reduce},
      .reads = units_[u].main_grads,
      .writes = units_[u].main_grads});
}

// One segment's backward (with its recompute under full recompute); returns the op.
int64_t ScheduleBuilder::emit_backward_of(const PlanSegment& seg, int64_t position,
                                          int64_t last_backward,
                                          const std::vector<int64_t>& reduce_by_position) {
  const auto u = static_cast<std::size_t>(seg.unit);
  const auto s = static_cast<std::size_t>(seg.id);
  const bool layer = seg.unit != 0;
  // An offloaded layer reads its activations as they came back from host.
  const bool reloaded = state_.reloaded[s] >= 0;
  std::vector<int64_t> reads = {reloaded ? state_.reloaded[s] : state_.activations[s]};
  if (state_.transpose_cache[u] >= 0) reads.push_back(state_.transpose_cache[u]);
  std::vector<int64_t> deps = {last_backward >= 0 ? last_backward : state_.last_forward};
  if (reloaded) deps.push_back(state_.reload[s]);
  if (s_.shard_params && (layer || gather_root_)) {
    const std::vector<int64_t>& gathered =
        layer ? state_.unsharded_bwd[u] : state_.unsharded_fwd[u];
    reads.insert(reads.end(), gathered.begin(), gathered.end());
    if (layer) deps.push_back(state_.ag_bwd[u]);
  } else {
    reads.insert(reads.end(), units_[u].weights.begin(), units_[u].weights.end());
  }
  if (layer && recomputes_whole_modules(c_.recompute) && seg.checkpointed) {
    const int64_t recomputed = emit_.transient(
        BufferRole::recompute_activations, seg.unit, mb_, c_.param_dtype, seg.full_activation_bytes,
        fmt::format("recompute_activations {} mb{}", seg.label, mb_));
    deps.push_back(emit_work(forward_work(seg, OpKind::recompute, deps, reads, {recomputed}), seg,
                             seg.forward_comms, "recompute"));
    reads.push_back(recomputed);
  }
  const bool grads = s_.shard_grads && has_grads(seg.unit);
  if (layer && grads) {
    const int64_t waited_position = drain_dependency(position, drain_depth(c_));
    if (waited_position >= 0) {
      const int64_t waited = reduce_by_position[static_cast<std::size_t>(waited_position)];
      if (waited >= 0) deps.push_back(waited);
    }
  }
  // PyTorch FSDP's final callback: the root's post-backward waits for the reduce-scatters
  // still in flight and drops their inputs before the root's own copy-in allocates
  // (_fsdp_param_group.py post_backward: current_stream().wait_event(
  // reduce_scatter_state.event), reduce_scatter_state = None, then foreach_reduce). The
  // root's last backward segment stands for that wait, so the layers' reduction buffers
  // are free before the root's reduction takes its own.
  if (torch_layout_ && !layer && grads && seg.id == plan_.segments.front().id) {
    const auto size = static_cast<int64_t>(reduce_by_position.size());
    for (int64_t p = std::max<int64_t>(0, size - drain_depth(c_)); p < size; ++p) {
      const int64_t pending = reduce_by_position[static_cast<std::size_t>(p)];
      if (pending >= 0) deps.push_back(pending);
    }
  }
  std::vector<int64_t> writes;
  double accumulate_bytes = 0;  // no_sync: the traffic of summing into the accumulator
  for (int domain : kDomains) {
    const auto d = static_cast<std::size_t>(domain);
    if (units_[u].main_grads_of[d].empty()) continue;
    const std::string where =
        fmt::format("{}{}", unit_label(plan_, seg.unit), domain == kExperts ? " experts" : "");
    if (grads && c_.no_sync) {
      // FSDP2 under set_requires_gradient_sync(False) (and in the last micro-batch before
      // it reduces): autograd writes param_dtype gradients, which post-backward upcasts
      // into the unit's accumulator (the first micro-batch) or adds to it (the rest);
      // without a reduce_dtype of its own the accumulator is the param_dtype .grad itself.
      const DType acc_dtype = accumulated_grad_dtype(c_);
      const double acc_bytes =
          unsharded_bytes(seg.unit, static_cast<double>(dtype_bytes(acc_dtype)), true, domain);
      int64_t& accumulated = accumulated_[u][d];
      const bool first = accumulated < 0;
      if (first) {
        accumulated = emit_.transient(BufferRole::accumulated_grad, seg.unit, mb_, acc_dtype,
                                      acc_bytes, fmt::format("accumulated_grad {}", where));
      } else {
        reads.push_back(accumulated);
      }
      if (cast_grads_) {
        const double grad = unsharded_bytes(
            seg.unit, static_cast<double>(dtype_bytes(c_.param_dtype)), true, domain);
        writes.push_back(emit_.transient(BufferRole::unsharded_grad, seg.unit, mb_, c_.param_dtype,
                                         grad, fmt::format("unsharded_grad {} mb{}", where, mb_)));
        accumulate_bytes += grad + (first ? acc_bytes : 2.0 * acc_bytes);
      } else if (!first) {
        accumulate_bytes += 2.0 * acc_bytes;
      }
      writes.push_back(accumulated);
    } else if (grads) {
      int64_t& unsharded = state_.unsharded_grad[u][d];
      if (unsharded < 0) {
        unsharded =
            double_buffered_ && layer
                ? double_buffer_for(num_layers() - 1 - position, true)
                : emit_.transient(
                      BufferRole::unsharded_grad, seg.unit, mb_,
                      cast_grads_ ? c_.param_dtype : c_.grad_reduce_dtype,
                      unsharded_bytes(seg.unit,
                                      cast_grads_ ? static_cast<double>(dtype_bytes(c_.param_dtype))
                                                  : grad_bytes_,
                                      true, domain),
                      fmt::format("unsharded_grad {} mb{}", where, mb_));
      }
      writes.push_back(unsharded);
    } else {
      writes.insert(writes.end(), units_[u].main_grads_of[d].begin(),
                    units_[u].main_grads_of[d].end());
    }
  }
  if (seg.workspace_bytes > 0) writes.push_back(workspace(seg, mb_, "bwd"));
  // Selective recompute's discarded outputs and checkpointed modules come back inside the
  // segment's backward, one module at a time, all within it.
  if (seg.recompute_bytes > 0) {
    writes.push_back(emit_.transient(BufferRole::recompute_activations, seg.unit, mb_,
                                     c_.param_dtype, seg.recompute_bytes,
                                     fmt::format("recompute_activations {} mb{}", seg.label, mb_)));
  }
  return emit_work(PlanOp{.stream = Stream::compute,
                          .kind = OpKind::backward,
                          .unit = seg.unit,
                          .segment = seg.id,
                          .micro_batch = mb_,
                          .name = fmt::format("bwd {} mb{}", seg.label, mb_),
                          .bytes = 2.0 * seg.io_bytes + seg.recompute_io_bytes +
                                   seg.fp8_cast_backward_bytes + accumulate_bytes,
                          .flops = seg.backward_flops,
                          .attention_flops = seg.backward_attention_flops,
                          .bf16_gemm_flops = seg.backward_bf16_gemm_flops,
                          .deps = std::move(deps),
                          .reads = std::move(reads),
                          .writes = std::move(writes),
                          .host_seconds = seg.backward_host_seconds},
                   seg, seg.backward_comms, "bwd");
}

void ScheduleBuilder::emit_backward(int64_t mb) {
  const int64_t kb = c_.backward_prefetch;
  // no_sync defers the sharded reductions to the last micro-batch, as no_shard and optim
  // always do.
  const bool reduce_now = (s_.shard_grads && !c_.no_sync) || mb == c_.grad_accum - 1;
  const std::vector<int64_t> backward_layers(layers_.rbegin(), layers_.rend());
  int64_t next_gather = 0;  // the next backward position to gather
  auto gather_triggered_by = [&](int64_t position, const std::vector<int64_t>& deps) {
    for (; s_.shard_params && next_gather < num_layers() &&
           gather_trigger(next_gather, kb) == position;
         ++next_gather) {
      gather(backward_layers[static_cast<std::size_t>(next_gather)], true,
             num_layers() - 1 - next_gather, deps);
    }
  };
  // Megatron-FSDP gathers the first backward layers when the forward ends; PyTorch FSDP
  // unshards a layer in its pre-backward hook (prefetching the next), after the loss and
  // the output layer's backward (measured on an H200: tests/data/h200/fsdp2_memory_curve).
  if (!torch_layout_) gather_triggered_by(-1, {state_.last_forward});
  int64_t position = 0;
  int64_t last_backward = -1;
  std::vector<int64_t> reduce_by_position;  // reduce op per backward position
  for (auto it = plan_.segments.rbegin(); it != plan_.segments.rend(); ++it) {
    const PlanSegment& seg = *it;
    // Transformer Engine prefetches one layer ahead: as this layer's backward starts, the
    // layer before it comes back from host into a new buffer.
    const int64_t previous = num_layers() - 2 - position;  // forward index of the layer before
    if (seg.unit != 0 && previous >= 0 && previous < c_.offload_activations) {
      reload_layer(previous, last_backward >= 0 ? last_backward : state_.last_forward);
    }
    if (torch_layout_ && seg.unit != 0 && position == 0) {
      gather_triggered_by(-1, {last_backward >= 0 ? last_backward : state_.last_forward});
    }
    last_backward = emit_backward_of(seg, position, last_backward, reduce_by_position);
    if (seg.unit == 0) continue;
    gather_triggered_by(position, {last_backward});
    if (reduce_now && has_grads(seg.unit)) {
      reduce(seg.unit, {last_backward});
      reduce_by_position.push_back(state_.reduce[static_cast<std::size_t>(seg.unit)]);
    } else {
      reduce_by_position.push_back(-1);
    }
    ++position;
  }
  // The root's final callback reduces the root unit, whose last gradient (the
  // embedding's) is produced last.
  if (reduce_now && has_grads(0)) reduce(0, {last_backward});
  // The root's final callback waits for every reduction still in flight, so the next
  // micro-batch (or the optimizer step) starts with none pending.
  next_start_deps_.assign(1, last_backward);
  next_start_deps_.insert(next_start_deps_.end(), pending_side_.begin(), pending_side_.end());
  backward_side_ = std::move(pending_side_);
  pending_side_.clear();
  for (int64_t r : state_.reduce) {
    if (r >= 0) next_start_deps_.push_back(r);
  }
}

void ScheduleBuilder::emit_optimizer_step() {
  // Any collective still overlapping the last backward.
  std::vector<int64_t> deps = backward_side_, reads, writes;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const UnitBuffers& unit = units_[u];
    if (last_reduce_[u] >= 0) deps.push_back(last_reduce_[u]);
    reads.insert(reads.end(), unit.main_grads.begin(), unit.main_grads.end());
    reads.insert(reads.end(), unit.optimizer.begin(), unit.optimizer.end());
    writes.insert(writes.end(), unit.optimizer.begin(), unit.optimizer.end());
    writes.insert(writes.end(), unit.weights.begin(), unit.weights.end());
  }
  // PyTorch FSDP steps the sharded parameters themselves (the main weights).
  double optimizer_bytes = 0;
  for (const PlanBuffer& b : plan_.buffers) {
    const bool stepped = b.role == BufferRole::main_weight ||
                         b.role == BufferRole::optimizer_state ||
                         (torch_layout_ && b.role == BufferRole::model_weight);
    if ((b.persistent && stepped) || b.role == BufferRole::main_grad) {
      optimizer_bytes += 2.0 * static_cast<double>(b.bytes);  // read and write back
    }
  }
  step_ = emit_.op(PlanOp{.stream = Stream::compute,
                          .kind = OpKind::optimizer_step,
                          .name = "optimizer_step",
                          .bytes = optimizer_bytes,
                          .deps = std::move(deps),
                          .reads = std::move(reads),
                          .writes = std::move(writes)});
}

// After the step, full weights are rebuilt from the updated shards: across dp_outer when
// the optimizer is sharded there, and across dp_shard for ZeRO-1/2, which keep full
// weights.
void ScheduleBuilder::emit_post_step_gathers() {
  const double param_bytes = static_cast<double>(dtype_bytes(c_.param_dtype));
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto unit = static_cast<int64_t>(u);
    if (!has_grads(unit)) continue;
    if (s_.outer_optimizer && s_.hsdp) {
      emit_.op(PlanOp{.stream = Stream::outer,
                      .kind = OpKind::all_gather,
                      .unit = unit,
                      .name = fmt::format("outer_ag {}", unit_label(plan_, unit)),
                      .bytes = unsharded_bytes(unit, param_bytes, true) / shard_ranks(),
                      .group = outer_group_,
                      .deps = {step_},
                      .reads = units_[u].optimizer,
                      .writes = units_[u].weights});
    }
    if (!s_.post_step_gather) continue;
    for (int domain : kDomains) {
      const auto d = static_cast<std::size_t>(domain);
      if (units_[u].main_grads_of[d].empty()) continue;
      emit_.op(PlanOp{.stream = Stream::ag,
                      .kind = OpKind::all_gather,
                      .unit = unit,
                      .name = fmt::format("ag_post {}{}", unit_label(plan_, unit),
                                          domain == kExperts ? " experts" : ""),
                      .bytes = unsharded_bytes(unit, param_bytes, true, domain),
                      .group = domain_groups_[d],
                      .deps = {step_},
                      .reads = units_[u].optimizer_of[d],
                      .writes = units_[u].weights_of[d]});
    }
  }
}

}  // namespace

int64_t gather_trigger(int64_t position, int64_t prefetch) {
  const int64_t trigger = position - prefetch - 1;
  return trigger < 0 ? -1 : trigger;
}

int64_t drain_dependency(int64_t position, int64_t drain) {
  return position >= drain ? position - drain : -1;
}

int64_t drain_depth(const FsdpConfig& config) {
  return config.async_reduce ? config.max_live_grad_buffers : 1;
}

void build_schedule(Plan& plan) {
  ScheduleBuilder builder(plan);
  for (int64_t mb = 0; mb < plan.config.grad_accum; ++mb) {
    builder.emit_forward(mb);
    builder.emit_backward(mb);
  }
  builder.emit_optimizer_step();
  // Before the post-step gathers: they run after the step, so they extend no transient
  // buffer's life.
  free_after_waiters(plan);
  builder.emit_post_step_gathers();
}

}  // namespace shardplan
