#include "planner/plan_validator.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "models/name_table.h"
#include "planner/sharding.h"
#include "pool/pool.h"

namespace shardplan {

std::string_view plan_error_kind_name(PlanErrorKind kind) {
  static constexpr NameTable<PlanErrorKind, 10> kNames = {
      {{PlanErrorKind::bad_dependency, "bad_dependency"},
       {PlanErrorKind::bad_buffer_ref, "bad_buffer_ref"},
       {PlanErrorKind::bad_interval, "bad_interval"},
       {PlanErrorKind::buffer_not_live, "buffer_not_live"},
       {PlanErrorKind::misaligned_offset, "misaligned_offset"},
       {PlanErrorKind::outside_pool, "outside_pool"},
       {PlanErrorKind::overlapping_buffers, "overlapping_buffers"},
       {PlanErrorKind::size_mismatch, "size_mismatch"},
       {PlanErrorKind::unwaited_async_use, "unwaited_async_use"},
       {PlanErrorKind::bad_process_group, "bad_process_group"}}};
  return name_of(kNames, kind);
}

namespace {

// Every group tiles the job's ranks; collectives name one, other ops none; a sharded
// buffer names the group its slices are spread over.
std::optional<PlanError> check_process_groups(const Plan& plan) {
  const auto num_groups = static_cast<int64_t>(plan.process_groups.size());
  for (const ProcessGroup& g : plan.process_groups) {
    if (g.size < 1 || g.stride < 1 || plan.num_gpus % (g.size * g.stride) != 0) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("process group '{}' of {} ranks {} apart does not tile {} GPUs",
                                   g.name, g.size, g.stride, plan.num_gpus)};
    }
  }
  // The mesh's groups, with the sizes its config gives them (sharding.h).
  const FsdpConfig& c = plan.config;
  std::vector<std::pair<const char*, int64_t>> mesh = {
      {"tp", c.tp}, {"cp", c.cp}, {"dp_shard_cp", c.dp_shard * c.cp}, {"dp_outer", c.dp_outer}};
  if (expert_mesh(c)) {
    if (c.ep * expert_tp(c) > plan.num_gpus || plan.num_gpus % (c.ep * expert_tp(c)) != 0) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("the expert mesh ep × etp = {} × {} does not divide {} GPUs",
                                   c.ep, expert_tp(c), plan.num_gpus)};
    }
    mesh.insert(mesh.end(), {{"ep", c.ep},
                             {"etp", expert_tp(c)},
                             {"ep_etp", c.ep * expert_tp(c)},
                             {"edp", plan.num_gpus / (c.ep * expert_tp(c))}});
  }
  for (const auto& [name, size] : mesh) {
    const int64_t g = find_process_group(plan, name);
    if (g < 0) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("no process group '{}'", name)};
    }
    if (plan.process_groups[static_cast<std::size_t>(g)].size != size) {
      return PlanError{
          PlanErrorKind::bad_process_group,
          fmt::format("process group '{}' has {} ranks; the config's mesh gives it {}", name,
                      plan.process_groups[static_cast<std::size_t>(g)].size, size)};
    }
  }
  if (c.tp * c.cp * c.dp_shard * c.dp_outer != plan.num_gpus) {
    return PlanError{PlanErrorKind::bad_process_group,
                     fmt::format("the mesh dp_outer × dp_shard × cp × tp = {} × {} × {} × {} is "
                                 "not the plan's {} GPUs",
                                 c.dp_outer, c.dp_shard, c.cp, c.tp, plan.num_gpus)};
  }
  for (const PlanOp& op : plan.ops) {
    const bool named = op.group >= 0 && op.group < num_groups;
    if (is_collective(op.kind) ? !named : op.group != -1) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("op {} '{}' names process group {} ({} groups; collectives name "
                                   "one, other ops -1)",
                                   op.id, op.name, op.group, num_groups)};
    }
  }
  for (const PlanBuffer& b : plan.buffers) {
    if (b.shard_group < -1 || b.shard_group >= num_groups) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("buffer {} '{}' is sharded over process group {} ({} groups)",
                                   b.id, b.name, b.shard_group, num_groups)};
    }
  }
  return std::nullopt;
}

// Ids are indices; dependencies point backwards; every buffer an op uses exists and is
// live then.
std::optional<PlanError> check_ops(const Plan& plan) {
  const auto num_ops = static_cast<int64_t>(plan.ops.size());
  const auto num_buffers = static_cast<int64_t>(plan.buffers.size());
  for (int64_t i = 0; i < num_buffers; ++i) {
    if (plan.buffers[static_cast<std::size_t>(i)].id != i) {
      return PlanError{PlanErrorKind::bad_buffer_ref,
                       fmt::format("buffer at index {} has id {}", i,
                                   plan.buffers[static_cast<std::size_t>(i)].id)};
    }
  }
  for (int64_t i = 0; i < num_ops; ++i) {
    const PlanOp& op = plan.ops[static_cast<std::size_t>(i)];
    if (op.id != i) {
      return PlanError{PlanErrorKind::bad_dependency,
                       fmt::format("op '{}' at index {} has id {}", op.name, i, op.id)};
    }
    for (int64_t dep : op.deps) {
      if (dep < 0 || dep >= i) {
        return PlanError{PlanErrorKind::bad_dependency,
                         fmt::format("op {} '{}' depends on op {}, which does not come before it",
                                     i, op.name, dep)};
      }
    }
    for (const auto* list : {&op.reads, &op.writes}) {
      for (int64_t b : *list) {
        if (b < 0 || b >= num_buffers) {
          return PlanError{
              PlanErrorKind::bad_buffer_ref,
              fmt::format("op {} '{}' uses buffer {}, which does not exist", i, op.name, b)};
        }
        const PlanBuffer& buffer = plan.buffers[static_cast<std::size_t>(b)];
        if (!buffer.persistent && (i < buffer.live_begin || i >= buffer.live_end)) {
          return PlanError{
              PlanErrorKind::buffer_not_live,
              fmt::format("op {} '{}' uses buffer {} '{}' outside its live ops [{}, {})", i,
                          op.name, b, buffer.name, buffer.live_begin, buffer.live_end)};
        }
      }
    }
  }

  return std::nullopt;
}

std::optional<PlanError> check_async_uses(const Plan& plan) {
  const auto num_ops = static_cast<int64_t>(plan.ops.size());
  // Async uses: the earliest compute op that waits for each communication op.
  const std::vector<int64_t> first_waiter = earliest_compute_waiters(plan);
  for (const PlanOp& op : plan.ops) {
    if (op.stream == Stream::compute) continue;
    for (const auto* list : {&op.reads, &op.writes}) {
      for (int64_t id : *list) {
        const PlanBuffer& b = plan.buffers[static_cast<std::size_t>(id)];
        if (b.persistent) continue;
        const int64_t waiter = first_waiter[static_cast<std::size_t>(op.id)];
        if (waiter >= num_ops || waiter > b.live_end) {
          return PlanError{
              PlanErrorKind::unwaited_async_use,
              fmt::format(
                  "buffer {} '{}' is freed at op {} but op {} '{}' on the {} stream uses it "
                  "and {}",
                  b.id, b.name, b.live_end, op.id, op.name, stream_name(op.stream),
                  waiter >= num_ops ? "no compute op waits for it"
                                    : fmt::format("is first waited for at op {}", waiter))};
        }
      }
    }
  }

  return std::nullopt;
}

// Sizes, intervals and pool offsets; fills `transient` with the pooled buffers.
std::optional<PlanError> check_buffers(const Plan& plan,
                                       std::vector<const PlanBuffer*>& transient) {
  const auto num_ops = static_cast<int64_t>(plan.ops.size());
  const int64_t alignment = plan.pool.alignment_bytes;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.bytes < 0) {
      return PlanError{PlanErrorKind::size_mismatch,
                       fmt::format("buffer {} '{}' has negative size", b.id, b.name)};
    }
    if (b.persistent) {
      if (b.offset >= 0) {
        return PlanError{PlanErrorKind::outside_pool,
                         fmt::format("persistent buffer {} '{}' has a pool offset", b.id, b.name)};
      }
      continue;
    }
    if (b.live_begin < 0 || b.live_begin >= b.live_end || b.live_end > num_ops) {
      return PlanError{PlanErrorKind::bad_interval,
                       fmt::format("buffer {} '{}' has live ops [{}, {}) in a plan of {} ops", b.id,
                                   b.name, b.live_begin, b.live_end, num_ops)};
    }
    if (b.offset < 0 || (alignment > 0 && b.offset % alignment != 0)) {
      return PlanError{PlanErrorKind::misaligned_offset,
                       fmt::format("buffer {} '{}' at offset {} is not aligned to {} bytes", b.id,
                                   b.name, b.offset, alignment)};
    }
    if (b.offset + b.bytes > plan.pool.size_bytes) {
      return PlanError{PlanErrorKind::outside_pool,
                       fmt::format("buffer {} '{}' ends at {} past the pool of {} bytes", b.id,
                                   b.name, b.offset + b.bytes, plan.pool.size_bytes)};
    }
    transient.push_back(&b);
  }

  return std::nullopt;
}

std::optional<PlanError> check_overlaps(const std::vector<const PlanBuffer*>& transient) {
  std::vector<PoolRequest> requests;
  std::vector<int64_t> offsets;
  for (const PlanBuffer* b : transient) {
    requests.push_back({.bytes = b->bytes, .begin = b->live_begin, .end = b->live_end});
    offsets.push_back(b->offset);
  }
  if (auto pair = find_overlap(requests, offsets)) {
    const PlanBuffer* a = transient[pair->first];
    const PlanBuffer* b = transient[pair->second];
    return PlanError{
        PlanErrorKind::overlapping_buffers,
        fmt::format("buffers {} '{}' [{}, {}) and {} '{}' [{}, {}) share bytes while both are live "
                    "(ops [{}, {}) and [{}, {}))",
                    a->id, a->name, a->offset, a->offset + a->bytes, b->id, b->name, b->offset,
                    b->offset + b->bytes, a->live_begin, a->live_end, b->live_begin, b->live_end)};
  }

  return std::nullopt;
}

// The pool is at least its bound; the parameter groups add up to their units.
std::optional<PlanError> check_sizes(const Plan& plan) {
  if (plan.pool.size_bytes < plan.pool.lower_bound_bytes) {
    return PlanError{PlanErrorKind::size_mismatch,
                     fmt::format("pool of {} bytes is below its lower bound of {}",
                                 plan.pool.size_bytes, plan.pool.lower_bound_bytes)};
  }
  for (const PlanUnit& unit : plan.units) {
    int64_t elements = 0;
    for (int64_t g : unit.groups) {
      if (g < 0 || g >= static_cast<int64_t>(plan.groups.size())) {
        return PlanError{PlanErrorKind::size_mismatch,
                         fmt::format("unit {} names group {}", unit.id, g)};
      }
      const ParamGroup& group = plan.groups[static_cast<std::size_t>(g)];
      const int64_t sharding = find_process_group(plan, param_group_name(group));
      if (sharding < 0) {
        return PlanError{PlanErrorKind::bad_process_group,
                         fmt::format("group {} shards over '{}', which the plan does not have", g,
                                     param_group_name(group))};
      }
      const int64_t shard_ranks = plan.process_groups[static_cast<std::size_t>(sharding)].size;
      if (group.padded_elements < group.elements ||
          group.shard_elements * shard_ranks != group.padded_elements) {
        return PlanError{PlanErrorKind::size_mismatch,
                         fmt::format("group {} pads {} elements to {} in shards of {}", g,
                                     group.elements, group.padded_elements, group.shard_elements)};
      }
      elements += group.elements;
    }
    if (elements != unit.parameters) {
      return PlanError{PlanErrorKind::size_mismatch,
                       fmt::format("unit {} '{}' has {} parameters but its groups hold {}", unit.id,
                                   unit.name, unit.parameters, elements)};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<PlanError> validate_plan(const Plan& plan) {
  if (auto error = check_process_groups(plan)) return error;
  if (auto error = check_ops(plan)) return error;
  if (auto error = check_async_uses(plan)) return error;
  std::vector<const PlanBuffer*> transient;
  if (auto error = check_buffers(plan, transient)) return error;
  if (auto error = check_overlaps(transient)) return error;
  return check_sizes(plan);
}

}  // namespace shardplan
