#pragma once

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
};

std::string_view plan_error_kind_name(PlanErrorKind kind);

struct PlanError {
  PlanErrorKind kind;
  std::string message;  // names the ops and buffers involved
};

// The one plan check (STYLE.md §5), used by every test and by the executor before it
// replays: dependencies point backwards, buffers referenced exist and are live when used,
// transient buffers are aligned, inside the pool and never overlap while both are live
// (half-open intervals), a transient buffer used on a communication stream stays live
// until a compute op waits for that use, the pool is at least its lower bound, and the
// parameter groups add up to the units. Returns nullopt for a valid plan.
std::optional<PlanError> validate_plan(const Plan& plan);

}  // namespace shardplan
