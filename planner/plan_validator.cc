#include "planner/plan_validator.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "models/integer_math.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "planner/sharding.h"
#include "pool/pool.h"

namespace shardplan {

std::string_view plan_error_kind_name(PlanErrorKind kind) {
  static constexpr NameTable<PlanErrorKind, 13> kNames = {
      {{PlanErrorKind::bad_dependency, "bad_dependency"},
       {PlanErrorKind::bad_buffer_ref, "bad_buffer_ref"},
       {PlanErrorKind::bad_interval, "bad_interval"},
       {PlanErrorKind::buffer_not_live, "buffer_not_live"},
       {PlanErrorKind::misaligned_offset, "misaligned_offset"},
       {PlanErrorKind::outside_pool, "outside_pool"},
       {PlanErrorKind::overlapping_buffers, "overlapping_buffers"},
       {PlanErrorKind::size_mismatch, "size_mismatch"},
       {PlanErrorKind::unwaited_async_use, "unwaited_async_use"},
       {PlanErrorKind::bad_process_group, "bad_process_group"},
       {PlanErrorKind::bad_reference, "bad_reference"},
       {PlanErrorKind::out_of_range, "out_of_range"},
       {PlanErrorKind::inconsistent_op, "inconsistent_op"}}};
  return name_of(kNames, kind);
}

namespace {

using limits::kMaxGpuMemoryBytes;
using limits::kMinGpuMemoryBytes;
using plan_limits::kMaxHostSeconds;
using plan_limits::kMaxOpBytes;
using plan_limits::kMaxOpFlops;

// Two numbers a plan computes the same way (an op's FLOPs and its segment's) may differ
// by the rounding of a decimal round trip through a hand-edited file.
constexpr double kRelativeTolerance = 1e-9;

bool at_most(double x, double limit) {
  return x <= limit + kRelativeTolerance * std::abs(limit);
}
// A buffer's whole bytes against an op's bytes, which may be fractional: buffers round
// down what the planner computes in doubles (an expert collective's 307582.29 bytes in a
// buffer of 307582).
bool within_buffer(double bytes, int64_t buffer_bytes) {
  return at_most(bytes, static_cast<double>(buffer_bytes) + 1);
}
bool same(double a, double b) {
  return std::abs(a - b) <= kRelativeTolerance * std::max(std::abs(a), std::abs(b));
}

// `what` is outside [lo, hi] (NaN and infinities included), as an out_of_range error.
template <typename T>
std::optional<PlanError> outside(const std::string& what, T value, T lo, T hi,
                                 std::string_view range) {
  if (value >= lo && value <= hi) return std::nullopt;
  return PlanError{PlanErrorKind::out_of_range,
                   fmt::format("{} is {}, outside [{}, {}] ({})", what, value, lo, hi, range)};
}

std::optional<PlanError> check_header(const Plan& plan) {
  const FsdpConfig& c = plan.config;
  // In order: a later bound may rest on an earlier one (non_tensor_bytes on capacity_bytes).
  if (auto e = outside<int64_t>("num_gpus", plan.num_gpus, 1, limits::kMaxGpus, "GPUs in one job"))
    return e;
  if (auto e = outside<int64_t>("gpus_per_node", plan.gpus_per_node, 1, limits::kMaxGpusPerNode,
                                "GPUs in one node"))
    return e;
  if (auto e = outside<int64_t>("capacity_bytes", plan.capacity_bytes, kMinGpuMemoryBytes,
                                kMaxGpuMemoryBytes, "one GPU's memory"))
    return e;
  if (auto e = outside<int64_t>("non_tensor_bytes", plan.non_tensor_bytes, 0,
                                plan.capacity_bytes - 1, "below capacity_bytes"))
    return e;
  if (auto e = outside<int64_t>("pool alignment_bytes", plan.pool.alignment_bytes, 1,
                                limits::kMaxAlignmentBytes, "an allocator's alignment"))
    return e;
  if (auto e = outside<int64_t>("pool size_bytes", plan.pool.size_bytes, 0, kMaxGpuMemoryBytes,
                                "one GPU's memory"))
    return e;
  if (auto e = outside<int64_t>("pool lower_bound_bytes", plan.pool.lower_bound_bytes, 0,
                                kMaxGpuMemoryBytes, "one GPU's memory"))
    return e;
  if (auto e = outside<int64_t>("config grad_accum", c.grad_accum, 1, limits::kMaxGradAccum,
                                "micro-batches per step"))
    return e;
  for (const auto& [name, value] :
       {std::pair{"config micro_batch", c.micro_batch}, {"config seq_len", c.seq_len}}) {
    if (auto e = outside<int64_t>(name, value, 1, limits::kMaxTokensPerMicroBatch,
                                  "tokens per micro-batch"))
      return e;
  }
  for (const auto& [name, value] : {std::pair{"config tp", c.tp}, {"config cp", c.cp}}) {
    if (auto e = outside<int64_t>(name, value, 1, limits::kMaxGpus, "GPUs in one job")) return e;
  }
  if (auto e = outside<double>("model_flops", plan.model_flops, 0, kMaxOpFlops, "a FLOP count"))
    return e;
  // The job's tokens per GPU, as the planner counts them (plan_builder.cc): each tensor-
  // and context-parallel group shares its sequences.
  const double tokens = static_cast<double>(c.micro_batch) * static_cast<double>(c.seq_len) *
                        static_cast<double>(c.grad_accum) / static_cast<double>(c.tp * c.cp);
  if (!same(plan.tokens_per_gpu, tokens)) {
    return PlanError{PlanErrorKind::size_mismatch,
                     fmt::format("tokens_per_gpu is {}, but micro_batch {} × seq_len {} × "
                                 "grad_accum {} ÷ (tp {} × cp {}) is {}",
                                 plan.tokens_per_gpu, c.micro_batch, c.seq_len, c.grad_accum, c.tp,
                                 c.cp, tokens)};
  }
  return std::nullopt;
}

// Every group tiles the job's ranks; collectives name one, other ops none; a sharded
// buffer names the group its slices are spread over.
std::optional<PlanError> check_process_groups(const Plan& plan) {
  const auto num_groups = static_cast<int64_t>(plan.process_groups.size());
  for (const ProcessGroup& g : plan.process_groups) {
    const std::optional<int64_t> span =
        g.size >= 1 && g.stride >= 1 ? checked_mul(g.size, g.stride) : std::nullopt;
    if (!span || plan.num_gpus % *span != 0) {
      return PlanError{PlanErrorKind::bad_process_group,
                       fmt::format("process group '{}' of {} ranks {} apart does not tile {} GPUs",
                                   g.name, g.size, g.stride, plan.num_gpus)};
    }
  }
  // The mesh's groups, with the sizes its config gives them (sharding.h). Each size is at
  // most the job's GPUs (check_header), so their products of two stay inside int64.
  const FsdpConfig& c = plan.config;
  if (c.dp_shard < 1 || c.dp_outer < 1 || c.ep < 1 || expert_tp(c) < 1 ||
      std::max({c.dp_shard, c.dp_outer, c.ep, expert_tp(c)}) > limits::kMaxGpus) {
    return PlanError{PlanErrorKind::bad_process_group,
                     fmt::format("the mesh dp_shard {}, dp_outer {}, ep {}, etp {} is not one of "
                                 "1 to {} GPUs",
                                 c.dp_shard, c.dp_outer, c.ep, expert_tp(c), limits::kMaxGpus)};
  }
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
  // Each factor is at most 2^20: three of them stay inside int64, the fourth is checked.
  const std::optional<int64_t> mesh_gpus = checked_mul(c.tp * c.cp * c.dp_shard, c.dp_outer);
  if (mesh_gpus != plan.num_gpus) {
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

// `index` names one of `count` things, or none (-1) where `none_allowed`.
bool names_one_of(int64_t index, std::size_t count, bool none_allowed) {
  return (none_allowed && index == -1) || (index >= 0 && index < static_cast<int64_t>(count));
}

std::optional<PlanError> bad_reference(std::string message) {
  return PlanError{PlanErrorKind::bad_reference, std::move(message)};
}

// Units, parameter groups and segments are numbered by position and name units that
// exist; a unit lists only its own groups.
std::optional<PlanError> check_model_references(const Plan& plan) {
  const std::size_t units = plan.units.size(), groups = plan.groups.size();
  for (std::size_t i = 0; i < units; ++i) {
    const PlanUnit& u = plan.units[i];
    if (u.id != static_cast<int64_t>(i))
      return bad_reference(fmt::format("unit at index {} has id {}", i, u.id));
    for (int64_t g : u.groups) {
      if (!names_one_of(g, groups, false) || plan.groups[static_cast<std::size_t>(g)].unit != u.id)
        return bad_reference(fmt::format(
            "unit {} '{}' lists parameter group {}, which {}", i, u.name, g,
            names_one_of(g, groups, false) ? "belongs to another unit"
                                           : fmt::format("does not exist ({} groups)", groups)));
    }
  }
  for (std::size_t i = 0; i < groups; ++i) {
    const ParamGroup& g = plan.groups[i];
    if (g.id != static_cast<int64_t>(i))
      return bad_reference(fmt::format("parameter group at index {} has id {}", i, g.id));
    if (!names_one_of(g.unit, units, false))
      return bad_reference(
          fmt::format("parameter group {} belongs to unit {} ({} units)", i, g.unit, units));
  }
  for (std::size_t i = 0; i < plan.segments.size(); ++i) {
    const PlanSegment& s = plan.segments[i];
    if (s.id != static_cast<int64_t>(i))
      return bad_reference(fmt::format("segment at index {} has id {}", i, s.id));
    if (!names_one_of(s.unit, units, false))
      return bad_reference(
          fmt::format("segment {} '{}' belongs to unit {} ({} units)", i, s.label, s.unit, units));
  }
  return std::nullopt;
}

// Buffers and ops name units, parameter groups, segments and micro-batches that exist
// (-1: none, or every micro-batch).
std::optional<PlanError> check_op_references(const Plan& plan) {
  const std::size_t units = plan.units.size();
  const auto micro_batches = static_cast<std::size_t>(plan.config.grad_accum);
  for (const PlanBuffer& b : plan.buffers) {
    if (!names_one_of(b.unit, units, true) || !names_one_of(b.group, plan.groups.size(), true) ||
        !names_one_of(b.micro_batch, micro_batches, true)) {
      return bad_reference(fmt::format(
          "buffer {} '{}' names unit {}, parameter group {} and micro-batch {}: the plan has {} "
          "units, {} groups and {} micro-batches (-1: none)",
          b.id, b.name, b.unit, b.group, b.micro_batch, units, plan.groups.size(), micro_batches));
    }
  }
  for (const PlanOp& op : plan.ops) {
    // An index into each consumer's per-stream tables (a plan built in memory may hold
    // any value; the reader takes names).
    if (!names_one_of(static_cast<int64_t>(op.stream), kNumStreams, false))
      return bad_reference(fmt::format("op {} '{}' runs on stream {} ({} streams)", op.id, op.name,
                                       static_cast<int>(op.stream), kNumStreams));
    if (!names_one_of(op.unit, units, true) ||
        !names_one_of(op.segment, plan.segments.size(), true) ||
        !names_one_of(op.micro_batch, micro_batches, true)) {
      return bad_reference(fmt::format(
          "op {} '{}' names unit {}, segment {} and micro-batch {}: the plan has {} units, {} "
          "segments and {} micro-batches (-1: none)",
          op.id, op.name, op.unit, op.segment, op.micro_batch, units, plan.segments.size(),
          micro_batches));
    }
  }
  return std::nullopt;
}

// A segment's numbers: FLOPs and traffic within their bounds, its attention and BF16
// parts within its FLOPs, and its matmuls part of its forward FLOPs, each small enough
// for one GPU to hold its operands (bf16) and for int dimensions (cuBLAS, Eigen).
std::optional<PlanError> check_segment(const PlanSegment& s) {
  struct Number {
    const char* name;
    double value;
    double limit;
    const char* range;
  };
  const Number numbers[] = {
      {"forward_flops", s.forward_flops, kMaxOpFlops, "FLOPs of one pass"},
      {"backward_flops", s.backward_flops, kMaxOpFlops, "FLOPs of one pass"},
      {"forward_attention_flops", s.forward_attention_flops, s.forward_flops, "forward_flops"},
      {"backward_attention_flops", s.backward_attention_flops, s.backward_flops, "backward_flops"},
      {"forward_bf16_gemm_flops", s.forward_bf16_gemm_flops,
       s.forward_flops - s.forward_attention_flops, "forward_flops less its attention"},
      {"backward_bf16_gemm_flops", s.backward_bf16_gemm_flops,
       s.backward_flops - s.backward_attention_flops, "backward_flops less its attention"},
      {"io_bytes", s.io_bytes, kMaxOpBytes, "bytes one op moves"},
      {"recompute_io_bytes", s.recompute_io_bytes, kMaxOpBytes, "bytes one op moves"},
      {"recompute_bytes", s.recompute_bytes, kMaxGpuMemoryBytes, "one GPU's memory"},
      {"fp8_cast_forward_bytes", s.fp8_cast_forward_bytes, kMaxOpBytes, "bytes one op moves"},
      {"fp8_cast_backward_bytes", s.fp8_cast_backward_bytes, kMaxOpBytes, "bytes one op moves"},
      {"activation_bytes", s.activation_bytes, kMaxGpuMemoryBytes, "one GPU's memory"},
      {"full_activation_bytes", s.full_activation_bytes, kMaxGpuMemoryBytes, "one GPU's memory"},
      {"workspace_bytes", s.workspace_bytes, kMaxGpuMemoryBytes, "one GPU's memory"},
      {"forward_host_seconds", s.forward_host_seconds, kMaxHostSeconds, "CPU seconds of a pass"},
      {"backward_host_seconds", s.backward_host_seconds, kMaxHostSeconds, "CPU seconds of a pass"},
  };
  for (const Number& n : numbers) {
    if (!(n.value >= 0 && at_most(n.value, n.limit))) {
      return PlanError{PlanErrorKind::out_of_range,
                       fmt::format("segment {} '{}' has {} {}, outside [0, {}] ({})", s.id, s.label,
                                   n.name, n.value, n.limit, n.range)};
    }
  }
  double gemm_flops = 0;
  double rounding = 0;
  for (const GemmShape& g : s.gemms) {
    const auto [m, n, k] = std::array<double, 3>{static_cast<double>(g.m), static_cast<double>(g.n),
                                                 static_cast<double>(g.k)};
    const double operand_bytes = 2 * (m * k + k * n + m * n);
    if (std::min({g.m, g.n, g.k}) < 1 || std::max({g.m, g.n, g.k}) > INT_MAX ||
        operand_bytes > static_cast<double>(kMaxGpuMemoryBytes)) {
      return PlanError{
          PlanErrorKind::out_of_range,
          fmt::format("segment {} '{}' has a matmul [{}, {}, {}]: dimensions must be "
                      "1 to {} and its bf16 operands ({:.3g} bytes) fit one GPU's "
                      "memory ({} bytes)",
                      s.id, s.label, g.m, g.n, g.k, INT_MAX, operand_bytes, kMaxGpuMemoryBytes)};
    }
    gemm_flops += 2 * m * n * k;
    // A matmul runs whole rows: a module that sees a fraction of the tokens (an expert's
    // share, a router) has its rows rounded, at least one (models/module_cost.cc
    // forward_gemms), so each may exceed its share of forward_flops by one row.
    rounding += 2 * n * k;
  }
  if (!at_most(gemm_flops, s.forward_flops + rounding)) {
    return PlanError{PlanErrorKind::size_mismatch,
                     fmt::format("segment {} '{}' has matmuls of {:.6g} FLOPs, more than its "
                                 "forward_flops {:.6g} (and a row of each matmul, {:.6g})",
                                 s.id, s.label, gemm_flops, s.forward_flops, rounding)};
  }
  return std::nullopt;
}

// An op's numbers within their bounds; its attention and BF16 parts within its FLOPs.
std::optional<PlanError> check_op_numbers(const PlanOp& op) {
  if (!(op.bytes >= 0 && op.bytes <= kMaxOpBytes) || !(op.flops >= 0 && op.flops <= kMaxOpFlops) ||
      !(op.attention_flops >= 0) || !(op.bf16_gemm_flops >= 0) ||
      !at_most(op.attention_flops + op.bf16_gemm_flops, op.flops)) {
    return PlanError{
        PlanErrorKind::out_of_range,
        fmt::format("op {} '{}' has bytes {}, flops {}, attention_flops {} and bf16_gemm_flops {}: "
                    "bytes must be in [0, {}], flops in [0, {}], and its attention and BF16 "
                    "parts non-negative and within its flops",
                    op.id, op.name, op.bytes, op.flops, op.attention_flops, op.bf16_gemm_flops,
                    kMaxOpBytes, kMaxOpFlops)};
  }
  if (!(op.host_seconds >= 0 && op.host_seconds <= kMaxHostSeconds)) {
    return PlanError{PlanErrorKind::out_of_range,
                     fmt::format("op {} '{}' has host_seconds {}, outside [0, {}]", op.id, op.name,
                                 op.host_seconds, kMaxHostSeconds)};
  }
  return std::nullopt;
}

std::optional<PlanError> inconsistent(const PlanOp& op, const std::string& why) {
  return PlanError{PlanErrorKind::inconsistent_op,
                   fmt::format("op {} '{}' ({}) {}", op.id, op.name, op_kind_name(op.kind), why)};
}

// A forward, recompute or backward op runs on the compute stream its segment's pass: the segment's
// FLOPs (and their attention and BF16 parts), and at least its activation traffic (exactly, for the
// forward; a backward adds no_sync's accumulation).
std::optional<PlanError> check_compute_op(const Plan& plan, const PlanOp& op) {
  // One compute stream, as a GPU's default stream runs the model (and the simulator
  // counts compute time, so MFU stays below what the GPU can do).
  if (op.stream != Stream::compute)
    return inconsistent(
        op, fmt::format("runs on the {} stream, not the compute stream", stream_name(op.stream)));
  if (op.segment < 0) return inconsistent(op, "names no segment");
  const PlanSegment& s = plan.segments[static_cast<std::size_t>(op.segment)];
  if (s.unit != op.unit)
    return inconsistent(
        op, fmt::format("runs segment {} of unit {} as unit {}", s.id, s.unit, op.unit));
  const bool backward = op.kind == OpKind::backward;
  const double flops = backward ? s.backward_flops : s.forward_flops;
  const double attention = backward ? s.backward_attention_flops : s.forward_attention_flops;
  const double bf16 = backward ? s.backward_bf16_gemm_flops : s.forward_bf16_gemm_flops;
  const double traffic = backward
                             ? 2 * s.io_bytes + s.recompute_io_bytes + s.fp8_cast_backward_bytes
                             : s.io_bytes + s.fp8_cast_forward_bytes;
  if (!same(op.flops, flops) || !same(op.attention_flops, attention) ||
      !same(op.bf16_gemm_flops, bf16)) {
    return inconsistent(op, fmt::format("has flops {}, attention {}, bf16 {}; its segment {} '{}' "
                                        "gives {}, {}, {}",
                                        op.flops, op.attention_flops, op.bf16_gemm_flops, s.id,
                                        s.label, flops, attention, bf16));
  }
  if (backward ? !at_most(traffic, op.bytes) : !same(op.bytes, traffic)) {
    return inconsistent(op, fmt::format("moves {} bytes; its segment {} '{}' moves {}{}", op.bytes,
                                        s.id, s.label, backward ? "at least " : "", traffic));
  }
  const double host = backward ? s.backward_host_seconds : s.forward_host_seconds;
  if (!same(op.host_seconds, host)) {
    return inconsistent(op, fmt::format("takes the host {} s to issue; its segment {} '{}' {}",
                                        op.host_seconds, s.id, s.label, host));
  }
  // A host sync belongs to a forward (or its re-run) whose segment syncs; the schedule
  // puts it on the segment's first op, which may be a collective before it.
  if (op.host_sync && (backward || !s.host_sync)) {
    return inconsistent(op, fmt::format("syncs the host, but its segment {} '{}' {}", s.id, s.label,
                                        backward ? "syncs in forward only" : "does not"));
  }
  return std::nullopt;
}

// A collective moves at most the elements of the buffers it touches (an all-gather's
// output, a reduction's input, each parameter group's part of an in-place reduction, a
// send/recv's or all-to-all's halves) counted in fp32, the widest type (a reduction runs
// in grad_reduce_dtype, fp32 over bf16 gradients); each buffer over its whole group stays
// inside int64 (the executor's collectives lay out group × bytes).
std::optional<PlanError> check_collective(const Plan& plan, const PlanOp& op) {
  int64_t largest = 0;
  double fp32_bytes = 0;
  std::vector<int64_t> touched = op.reads;
  touched.insert(touched.end(), op.writes.begin(), op.writes.end());
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int64_t id : touched) {
    const PlanBuffer& b = plan.buffers[static_cast<std::size_t>(id)];
    fp32_bytes += static_cast<double>(b.bytes / dtype_bytes(b.dtype) * dtype_bytes(DType::fp32));
    largest = std::max(largest, b.bytes);
  }
  if (!at_most(op.bytes, fp32_bytes + 1))
    return inconsistent(op, fmt::format("moves {} bytes, more than the buffers it touches hold in "
                                        "fp32 ({} bytes)",
                                        op.bytes, fp32_bytes));
  const int64_t ranks = plan.process_groups[static_cast<std::size_t>(op.group)].size;
  const std::optional<int64_t> over_group = checked_mul(largest, ranks);
  if (!over_group || *over_group > limits::kMaxPoolBytes)
    return inconsistent(op, fmt::format("runs over {} ranks on buffers of up to {} bytes: more "
                                        "than 2^62 bytes over the group",
                                        ranks, largest));
  return std::nullopt;
}

// Activation offload: an offload reads the layer's saved buffer and copies at most its
// bytes to host memory; a reload writes a buffer from the copy an earlier offload of
// the same unit and micro-batch made.
std::optional<PlanError> check_host_copy(const Plan& plan, const PlanOp& op,
                                         std::set<std::pair<int64_t, int64_t>>& offloaded) {
  const bool offload = op.kind == OpKind::offload;
  const std::vector<int64_t>& device = offload ? op.reads : op.writes;
  if (device.size() != 1)
    return inconsistent(op, fmt::format("{} {} buffers; it copies one",
                                        offload ? "reads" : "writes", device.size()));
  const int64_t bytes = plan.buffers[static_cast<std::size_t>(device[0])].bytes;
  if (!within_buffer(op.bytes, bytes))
    return inconsistent(op, fmt::format("copies {} bytes of a {}-byte buffer", op.bytes, bytes));
  const std::pair key{op.unit, op.micro_batch};
  if (offload) {
    offloaded.insert(key);
  } else if (!offloaded.contains(key)) {
    return inconsistent(op, fmt::format("reloads unit {} micro-batch {}, which no earlier op "
                                        "offloads",
                                        op.unit, op.micro_batch));
  }
  return std::nullopt;
}

// Each op's work is its kind's; the model FLOPs (MFU's numerator, PaLM's convention: 3 ×
// the forward, no causal discount, no recompute) are at most 6 × the forward ops' FLOPs
// (which count causal attention's context FLOPs at half). A model's own backward may
// be cheaper than 2 × its forward (an explicit model's bwd_flops_factor), so the bound
// rests on the forward alone.
std::optional<PlanError> check_work(const Plan& plan) {
  for (const PlanSegment& s : plan.segments)
    if (auto error = check_segment(s)) return error;
  std::set<std::pair<int64_t, int64_t>> offloaded;
  double forward_flops = 0;
  for (const PlanOp& op : plan.ops) {
    if (auto error = check_op_numbers(op)) return error;
    std::optional<PlanError> error;
    switch (op.kind) {
      case OpKind::forward:
      case OpKind::recompute:
      case OpKind::backward:
        error = check_compute_op(plan, op);
        if (op.kind == OpKind::forward) forward_flops += op.flops;
        break;
      case OpKind::offload:
      case OpKind::reload:
        error = check_host_copy(plan, op, offloaded);
        break;
      case OpKind::optimizer_step:
        break;
      default:
        error = check_collective(plan, op);
        break;
    }
    if (error) return error;
  }
  if (!at_most(plan.model_flops, 6 * forward_flops)) {
    return PlanError{PlanErrorKind::size_mismatch,
                     fmt::format("model_flops {:.6g} exceed 6 × the {:.6g} FLOPs the forward ops "
                                 "run (3 × the forward, causal attention counted whole)",
                                 plan.model_flops, forward_flops)};
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

// Sizes, intervals and pool offsets; fills `transient` with the pooled buffers. What one
// rank holds (non-tensor memory, the pool and the persistent buffers) is within one GPU's
// memory, so no consumer's total of it overflows.
std::optional<PlanError> check_buffers(const Plan& plan,
                                       std::vector<const PlanBuffer*>& transient) {
  const auto num_ops = static_cast<int64_t>(plan.ops.size());
  const int64_t alignment = plan.pool.alignment_bytes;
  // Both terms are at most kMaxGpuMemoryBytes (check_header), as is every buffer below.
  int64_t held = plan.non_tensor_bytes + plan.pool.size_bytes;
  // Every buffer's bytes together, transient ones of every op included: what a simulated
  // allocator may hold at once, whatever the timing, stays inside int64.
  int64_t all_buffers = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.bytes < 0 || b.bytes > kMaxGpuMemoryBytes) {
      return PlanError{PlanErrorKind::out_of_range,
                       fmt::format("buffer {} '{}' has {} bytes, outside [0, {}] (one GPU's "
                                   "memory)",
                                   b.id, b.name, b.bytes, kMaxGpuMemoryBytes)};
    }
    all_buffers += b.bytes;
    if (all_buffers > limits::kMaxPoolBytes) {
      return PlanError{
          PlanErrorKind::out_of_range,
          fmt::format("the buffers up to {} '{}' hold more than 2^62 bytes in all", b.id, b.name)};
    }
    if (b.persistent) {
      if (b.offset >= 0) {
        return PlanError{PlanErrorKind::outside_pool,
                         fmt::format("persistent buffer {} '{}' has a pool offset", b.id, b.name)};
      }
      held += b.bytes;
      if (held > kMaxGpuMemoryBytes) {
        return PlanError{PlanErrorKind::out_of_range,
                         fmt::format("one rank holds more than {} bytes (one GPU's memory) with "
                                     "buffer {} '{}': non_tensor_bytes, the pool and the "
                                     "persistent buffers",
                                     kMaxGpuMemoryBytes, b.id, b.name)};
      }
      continue;
    }
    if (b.live_begin < 0 || b.live_begin >= b.live_end || b.live_end > num_ops) {
      return PlanError{PlanErrorKind::bad_interval,
                       fmt::format("buffer {} '{}' has live ops [{}, {}) in a plan of {} ops", b.id,
                                   b.name, b.live_begin, b.live_end, num_ops)};
    }
    if (b.offset < 0 || b.offset % alignment != 0) {
      return PlanError{PlanErrorKind::misaligned_offset,
                       fmt::format("buffer {} '{}' at offset {} is not aligned to {} bytes", b.id,
                                   b.name, b.offset, alignment)};
    }
    const std::optional<int64_t> end = checked_add(b.offset, b.bytes);
    if (!end || *end > plan.pool.size_bytes) {
      return PlanError{PlanErrorKind::outside_pool,
                       fmt::format("buffer {} '{}' of {} bytes at offset {} ends past the pool of "
                                   "{} bytes",
                                   b.id, b.name, b.bytes, b.offset, plan.pool.size_bytes)};
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

// The pool is at least its bound; the parameter groups add up to their units (element
// counts below 2^62: no sum of them overflows).
std::optional<PlanError> check_sizes(const Plan& plan) {
  if (plan.pool.size_bytes < plan.pool.lower_bound_bytes) {
    return PlanError{PlanErrorKind::size_mismatch,
                     fmt::format("pool of {} bytes is below its lower bound of {}",
                                 plan.pool.size_bytes, plan.pool.lower_bound_bytes)};
  }
  for (const PlanUnit& unit : plan.units) {
    int64_t elements = 0;
    for (int64_t g : unit.groups) {
      const ParamGroup& group = plan.groups[static_cast<std::size_t>(g)];
      const int64_t sharding = find_process_group(plan, param_group_name(group));
      if (sharding < 0) {
        return PlanError{PlanErrorKind::bad_process_group,
                         fmt::format("group {} shards over '{}', which the plan does not have", g,
                                     param_group_name(group))};
      }
      const int64_t shard_ranks = plan.process_groups[static_cast<std::size_t>(sharding)].size;
      const std::optional<int64_t> padded = checked_mul(group.shard_elements, shard_ranks);
      if (group.elements < 0 || group.padded_elements < group.elements ||
          group.padded_elements > limits::kMaxPoolBytes || !padded ||
          *padded != group.padded_elements) {
        return PlanError{PlanErrorKind::size_mismatch,
                         fmt::format("group {} pads {} elements to {} in shards of {}", g,
                                     group.elements, group.padded_elements, group.shard_elements)};
      }
      elements += group.elements;
      if (elements > limits::kMaxPoolBytes) {
        return PlanError{
            PlanErrorKind::size_mismatch,
            fmt::format("unit {} '{}' holds more than 2^62 parameters", unit.id, unit.name)};
      }
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
  // Ranges and references first: the later checks index by them.
  if (auto error = check_header(plan)) return error;
  if (auto error = check_process_groups(plan)) return error;
  if (auto error = check_model_references(plan)) return error;
  if (auto error = check_op_references(plan)) return error;
  if (auto error = check_ops(plan)) return error;
  std::vector<const PlanBuffer*> transient;
  if (auto error = check_buffers(plan, transient)) return error;
  if (auto error = check_work(plan)) return error;
  if (auto error = check_async_uses(plan)) return error;
  if (auto error = check_overlaps(transient)) return error;
  return check_sizes(plan);
}

}  // namespace shardplan
