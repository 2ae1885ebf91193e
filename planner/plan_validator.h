#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "planner/plan.h"

namespace shardplan {

enum class PlanErrorKind {
  bad_dependency,       // a dependency that does not exist or does not point backwards
  bad_buffer_ref,       // an op names a buffer that does not exist
  bad_interval,         // a transient buffer's live interval is empty or outside the ops
  buffer_not_live,      // an op touches a transient buffer outside its live interval
  misaligned_offset,    // a pool offset not a multiple of the alignment
  outside_pool,         // a buffer reaching past the pool's end, or a persistent one in it
  overlapping_buffers,  // two buffers live at once share bytes
  size_mismatch,        // totals that do not add up (groups, pool vs lower bound)
  unwaited_async_use,   // a buffer freed before a compute op waits for its async reader
  bad_process_group,    // a group that does not tile the ranks, or a reference to none
  bad_reference,        // a unit, segment, parameter group or micro-batch that does not exist
  out_of_range,         // a number negative, not finite, or beyond any GPU (plan_limits)
  inconsistent_op,      // an op's work is not its kind's: FLOPs not its segment's, a
                        // collective moving more than its buffers hold
};

std::string_view plan_error_kind_name(PlanErrorKind kind);

struct PlanError {
  PlanErrorKind kind;
  std::string message;  // names the ops and buffers involved
};

// What a plan's numbers may be: far above any real job, so no plan the planner makes for
// a GPU that exists is refused, and far enough below int64 and double's range that no
// consumer's sums overflow and no simulated result is absurd (docs/formats.md, Limits).
namespace plan_limits {

// One GPU's memory is limits::kMinGpuMemoryBytes to kMaxGpuMemoryBytes (1 GiB to 16 TiB,
// as a cluster's gpu.hbm_bytes). The plan's capacity_bytes lies in it; every buffer, the
// pool and everything one rank holds (non_tensor_bytes + the pool + the persistent
// buffers) stay within its top: a plan needing more is not a plan for any GPU. Offsets
// and sums then stay far inside int64.

// Bytes one op moves (a collective's message, a compute op's activation traffic, a
// segment's io_bytes): 2^50 (1 PiB), 64 times the largest GPU memory above. A
// micro-batch of one layer reads and writes its activations a few times over.
inline constexpr double kMaxOpBytes = 0x1p50;

// FLOPs of one op or one segment's pass: 10^27, 25 times the whole training run of
// Llama 3.1 405B (3.8 · 10^25 FLOPs, Dubey et al. 2024, "The Llama 3 Herd of Models").
inline constexpr double kMaxOpFlops = 1e27;

// CPU seconds issuing one op or one segment's pass: an hour, where the largest layer's
// kernels take milliseconds (models/host_work.h).
inline constexpr double kMaxHostSeconds = 3600.0;

}  // namespace plan_limits

// The one plan check (STYLE.md §5), used by every test, by every command that reads a
// plan and by the executor before it replays. A plan it accepts is safe for every
// consumer (simulate, pack, execute on any backend, calibrate): no index out of range,
// no sum past int64, no number past its physical bound.
//  - numbers: num_gpus and gpus_per_node within the job limits, capacity_bytes one GPU's
//    memory and non_tensor_bytes below it, every byte count, FLOP count and rate finite,
//    non-negative and within plan_limits, tokens_per_gpu the config's;
//  - references: ids are indices; units, parameter groups, segments, micro-batches
//    (below grad_accum), process groups and buffers that ops and buffers name exist;
//    dependencies point backwards;
//  - work: a forward, recompute or backward op names a segment of its unit and has that
//    segment's FLOPs and activation traffic, the segment's matmuls are part of its
//    forward FLOPs (each may run one whole row past its share), a collective moves no more
//    than the buffers it touches hold, counted in fp32, an
//    offload reads and a reload writes a buffer, and the model FLOPs (MFU's numerator)
//    are at most 6 × those the forward ops run (3 × the forward, with causal attention
//    counted whole);
//  - memory: buffers are live when used, transient buffers are aligned, inside the pool
//    and never overlap while both are live (half-open intervals), a transient buffer used
//    on a communication stream stays live until a compute op waits for that use, the pool
//    is at least its lower bound, what one rank holds is within one GPU's memory, and the
//    parameter groups add up to their units.
// Returns nullopt for a valid plan.
std::optional<PlanError> validate_plan(const Plan& plan);

}  // namespace shardplan
