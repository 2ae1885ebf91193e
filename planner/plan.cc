#include "planner/plan.h"

#include <algorithm>

#include "models/name_table.h"

namespace shardplan {
namespace {

constexpr NameTable<Stream, kNumStreams> kStreams = {{{Stream::compute, "compute"},
                                                      {Stream::ag, "ag"},
                                                      {Stream::rs, "rs"},
                                                      {Stream::outer, "outer"},
                                                      {Stream::tp, "tp"},
                                                      {Stream::cp, "cp"},
                                                      {Stream::d2h, "d2h"},
                                                      {Stream::h2d, "h2d"}}};
constexpr NameTable<OpKind, 11> kOpKinds = {{{OpKind::all_gather, "all_gather"},
                                             {OpKind::reduce_scatter, "reduce_scatter"},
                                             {OpKind::all_reduce, "all_reduce"},
                                             {OpKind::forward, "forward"},
                                             {OpKind::backward, "backward"},
                                             {OpKind::recompute, "recompute"},
                                             {OpKind::optimizer_step, "optimizer_step"},
                                             {OpKind::send_recv, "send_recv"},
                                             {OpKind::all_to_all, "all_to_all"},
                                             {OpKind::offload, "offload"},
                                             {OpKind::reload, "reload"}}};
constexpr NameTable<BufferRole, 18> kRoles = {
    {{BufferRole::model_weight, "model_weight"},
     {BufferRole::fp8_columnwise_weight, "fp8_columnwise_weight"},
     {BufferRole::fp8_transpose_cache, "fp8_transpose_cache"},
     {BufferRole::main_weight, "main_weight"},
     {BufferRole::main_grad, "main_grad"},
     {BufferRole::optimizer_state, "optimizer_state"},
     {BufferRole::unsharded_weight, "unsharded_weight"},
     {BufferRole::unsharded_grad, "unsharded_grad"},
     {BufferRole::activations, "activations"},
     {BufferRole::recompute_activations, "recompute_activations"},
     {BufferRole::double_buffer, "double_buffer"},
     {BufferRole::tp_buffer, "tp_buffer"},
     {BufferRole::ep_buffer, "ep_buffer"},
     {BufferRole::cp_buffer, "cp_buffer"},
     {BufferRole::fp8_weight_cache, "fp8_weight_cache"},
     {BufferRole::workspace, "workspace"},
     {BufferRole::reloaded_activations, "reloaded_activations"},
     {BufferRole::accumulated_grad, "accumulated_grad"}}};

}  // namespace

std::string_view stream_name(Stream s) {
  return name_of(kStreams, s);
}
std::string_view op_kind_name(OpKind k) {
  return name_of(kOpKinds, k);
}
std::string_view buffer_role_name(BufferRole r) {
  return name_of(kRoles, r);
}

std::optional<Stream> parse_stream(std::string_view text) {
  return value_of(kStreams, text);
}
std::optional<OpKind> parse_op_kind(std::string_view text) {
  return value_of(kOpKinds, text);
}
std::optional<BufferRole> parse_buffer_role(std::string_view text) {
  return value_of(kRoles, text);
}

std::vector<std::string> stream_names() {
  return names_of(kStreams);
}
std::vector<std::string> op_kind_names() {
  return names_of(kOpKinds);
}
std::vector<std::string> buffer_role_names() {
  return names_of(kRoles);
}

std::vector<GemmShape> op_gemms(const Plan& plan, const PlanOp& op) {
  std::vector<GemmShape> out;
  if (op.segment < 0) return out;
  for (const GemmShape& g : plan.segments[static_cast<std::size_t>(op.segment)].gemms) {
    if (op.kind == OpKind::backward) {
      out.push_back({.m = g.m, .n = g.k, .k = g.n, .groups = g.groups});
      out.push_back({.m = g.n, .n = g.k, .k = g.m, .groups = g.groups, .weight_gradient = true});
    } else {
      out.push_back(g);
    }
  }
  return out;
}

OpKind op_kind_of(CommKind kind) {
  switch (kind) {
    case CommKind::all_gather:
      return OpKind::all_gather;
    case CommKind::reduce_scatter:
      return OpKind::reduce_scatter;
    case CommKind::all_reduce:
      return OpKind::all_reduce;
    case CommKind::send_recv:
      return OpKind::send_recv;
    case CommKind::all_to_all:
      return OpKind::all_to_all;
  }
  return OpKind::all_gather;
}

double comm_buffer_bytes(CommKind kind, double bytes) {
  return kind == CommKind::send_recv || kind == CommKind::all_to_all ? 2.0 * bytes : bytes;
}

bool is_collective(OpKind kind) {
  return kind == OpKind::all_gather || kind == OpKind::reduce_scatter ||
         kind == OpKind::all_reduce || kind == OpKind::send_recv || kind == OpKind::all_to_all;
}

int64_t group_rank(const ProcessGroup& group, int64_t rank) {
  return rank / group.stride % group.size;
}

RankLayout group_layout(const ProcessGroup& group, int64_t gpus_per_node) {
  const int64_t per_node = std::max<int64_t>(gpus_per_node, 1);
  return {group.size,
          std::clamp<int64_t>(per_node / std::max<int64_t>(group.stride, 1), 1, group.size)};
}

int64_t group_instance(const ProcessGroup& group, int64_t rank) {
  // The rank with position 0 in the instance names it.
  return rank - group_rank(group, rank) * group.stride;
}

int64_t find_process_group(const Plan& plan, std::string_view name) {
  for (std::size_t g = 0; g < plan.process_groups.size(); ++g) {
    if (plan.process_groups[g].name == name) return static_cast<int64_t>(g);
  }
  return -1;
}

int64_t op_group_size(const Plan& plan, const PlanOp& op) {
  if (op.group < 0 || op.group >= static_cast<int64_t>(plan.process_groups.size())) return 1;
  return plan.process_groups[static_cast<std::size_t>(op.group)].size;
}

std::vector<int64_t> earliest_compute_waiters(const Plan& plan) {
  const auto n = static_cast<int64_t>(plan.ops.size());
  std::vector<int64_t> waiter(plan.ops.size(), n);
  // Dependents come after their dependencies, so one backward pass settles every op.
  for (int64_t i = n - 1; i >= 0; --i) {
    const PlanOp& op = plan.ops[static_cast<std::size_t>(i)];
    const int64_t via = op.stream == Stream::compute ? i : waiter[static_cast<std::size_t>(i)];
    for (int64_t d : op.deps) {
      if (d < 0 || d >= i) continue;
      auto& w = waiter[static_cast<std::size_t>(d)];
      w = std::min(w, via);
    }
  }
  return waiter;
}

Timeline plan_timeline(const Plan& plan, std::string source, std::string allocator,
                       const std::vector<double>& start, const std::vector<double>& end) {
  Timeline t{.source = std::move(source),
             .model = plan.model,
             .cluster = plan.cluster,
             .num_gpus = plan.num_gpus,
             .allocator = std::move(allocator)};
  t.ops.reserve(plan.ops.size());
  for (const PlanOp& op : plan.ops) {
    const auto i = static_cast<std::size_t>(op.id);
    t.ops.push_back({.op = op.id,
                     .name = op.name,
                     .stream = std::string(stream_name(op.stream)),
                     .kind = std::string(op_kind_name(op.kind)),
                     .start = start[i],
                     .end = end[i],
                     .bytes = op.bytes,
                     .flops = op.flops,
                     .group = op.group >= 0
                                  ? plan.process_groups[static_cast<std::size_t>(op.group)].name
                                  : std::string()});
  }
  return t;
}

bool is_model_parallel_group(const Plan& plan, int64_t group) {
  if (group < 0) return false;
  const std::string& name = plan.process_groups[static_cast<std::size_t>(group)].name;
  return is_model_parallel_group_name(name);
}

BufferRole comm_buffer_role(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::tp:
      return BufferRole::tp_buffer;
    case MeshAxis::cp:
      return BufferRole::cp_buffer;
    case MeshAxis::ep:
    case MeshAxis::etp:
    case MeshAxis::ep_etp:
      break;
  }
  return BufferRole::ep_buffer;
}

bool is_comm_buffer(BufferRole role) {
  return role == BufferRole::tp_buffer || role == BufferRole::cp_buffer ||
         role == BufferRole::ep_buffer;
}

}  // namespace shardplan
