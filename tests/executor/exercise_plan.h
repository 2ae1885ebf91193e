#pragma once

// What the commands do with a plan that validates, in process: `simulate` it on the
// cluster it was made for and replay it on the fake backend (fake_backend.h), checking
// that each result is finite and within what the plan allows. A plan that validates
// must never crash, hang or give an absurd number here (validate_plan's contract); the
// plan.json fuzz target runs this on every plan that validates, and
// hostile_plan_test.cc on hand-mutated plans.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "executor/replay.h"
#include "models/cluster_spec.h"
#include "models/error.h"
#include "planner/plan_validator.h"
#include "simulator/simulate.h"
#include "tests/executor/fake_backend.h"

namespace shardplan::testing {

// A replay on the fake backend takes the plan's memory from the heap: plans holding more
// are simulated only (a fuzzer's memory limit is 2 GB).
inline constexpr int64_t kMaxExercisedReplayBytes = int64_t{64} << 20;

// The largest MFU a plan that validates can show on a built-in cluster: its model FLOPs
// are at most 6 × what its forward ops run (validate_plan), which run one at a time on
// the compute stream at no more than the FP8 peak, at most twice the BF16 peak that MFU
// divides by (H100, H200, B200, GB200). Anything above is a number no GPU could measure.
inline constexpr double kMaxSimulatedMfu = 12;

namespace exercise_detail {

inline std::optional<std::string> check_summary(const Plan& plan, const Timeline& t,
                                                const char* what) {
  const TimelineSummary& s = t.summary;
  if (!(std::isfinite(s.step_seconds) && s.step_seconds >= 0))
    return fmt::format("{}: step of {} s", what, s.step_seconds);
  if (!(std::isfinite(s.tokens_per_second_per_gpu) && s.tokens_per_second_per_gpu >= 0))
    return fmt::format("{}: {} tokens/s", what, s.tokens_per_second_per_gpu);
  if (!(s.mfu >= 0 && s.mfu <= kMaxSimulatedMfu)) return fmt::format("{}: MFU {}", what, s.mfu);
  if (s.peak_allocated_bytes < 0 || s.peak_reserved_bytes < s.peak_allocated_bytes)
    return fmt::format("{}: peaks {} allocated, {} reserved", what, s.peak_allocated_bytes,
                       s.peak_reserved_bytes);
  for (const TimelineOp& op : t.ops) {
    if (!(std::isfinite(op.start) && op.start >= 0 && op.end >= op.start &&
          op.end <= s.step_seconds))
      return fmt::format("{}: op {} '{}' at [{}, {}] in a step of {} s", what, op.op, op.name,
                         op.start, op.end, s.step_seconds);
  }
  if (t.ops.size() != plan.ops.size()) return fmt::format("{}: {} ops timed", what, t.ops.size());
  return std::nullopt;
}

// What simulate_command does with a plan file: its built-in cluster, sized to the plan.
inline std::optional<ClusterSpec> plan_cluster(const Plan& plan) {
  static const std::vector<std::string> names = cluster_zoo_names();
  if (std::find(names.begin(), names.end(), plan.cluster) == names.end()) return std::nullopt;
  try {
    ClusterSpec cluster = load_cluster(plan.cluster, std::nullopt, plan.num_gpus);
    if (cluster.gpus_per_node != plan.gpus_per_node) return std::nullopt;
    return cluster;
  } catch (const InputError&) {
    return std::nullopt;  // the command's clear error
  }
}

}  // namespace exercise_detail

// Simulates `plan` (which must validate) and replays it on the fake backend; returns
// what broke, or nullopt. A clear error (InputError; IntegrityError, for a plan that
// reads a buffer before any op wrote it) is an answer, not a break.
inline std::optional<std::string> exercise_valid_plan(const Plan& plan) {
  if (auto error = validate_plan(plan)) return "exercise_valid_plan: " + error->message;
  if (const auto cluster = exercise_detail::plan_cluster(plan)) {
    const Timeline t = simulate(plan, *cluster);
    if (auto broken = exercise_detail::check_summary(plan, t, "simulate")) return broken;
  }
  int64_t held = plan.pool.size_bytes;
  for (const PlanBuffer& b : plan.buffers) held += b.persistent ? b.bytes : 0;
  if (held > kMaxExercisedReplayBytes) return std::nullopt;
  FakeBackend backend(static_cast<int>(plan.num_gpus));
  try {
    const Timeline t = replay(plan, backend, {.warmup = 0, .steps = 1});
    if (auto broken = exercise_detail::check_summary(plan, t, "replay")) return broken;
  } catch (const InputError&) {
  } catch (const IntegrityError&) {
  }
  for (const FakeBackend::Allocation& a : backend.allocations)
    if (!a.released) return std::string("replay: an allocation was not released");
  return std::nullopt;
}

}  // namespace shardplan::testing
