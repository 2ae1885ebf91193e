#include "planner/plan_memory.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "planner/memory_replay.h"
#include "pool/pool.h"

namespace shardplan {
namespace {

// Largest total bytes of the buffers `pick` selects that are live at any one op.
template <typename Pick>
double transient_peak(const Plan& plan, const Pick& pick) {
  std::vector<PoolRequest> requests;
  for (const PlanBuffer& b : plan.buffers) {
    if (!b.persistent && pick(b))
      requests.push_back({.bytes = b.bytes, .begin = b.live_begin, .end = b.live_end});
  }
  return static_cast<double>(live_bytes_lower_bound(requests));
}

}  // namespace

PlanMemory plan_memory(const Plan& plan) {
  PlanMemory m;
  for (const PlanBuffer& b : plan.buffers) {
    if (!b.persistent && b.role == BufferRole::main_grad) {
      m.main_grads += static_cast<double>(b.bytes);
      m.main_grads_transient = true;
    }
    if (!b.persistent) continue;
    const auto bytes = static_cast<double>(b.bytes);
    switch (b.role) {
      case BufferRole::model_weight:
      case BufferRole::fp8_columnwise_weight:
      case BufferRole::fp8_weight_cache:
        m.model_weights += bytes;
        break;
      case BufferRole::main_weight:
        m.main_weights += bytes;
        break;
      case BufferRole::main_grad:
        m.main_grads += bytes;
        break;
      case BufferRole::optimizer_state:
        m.optimizer_states += bytes;
        break;
      case BufferRole::double_buffer:
        m.double_buffers += bytes;
        break;
      default:
        break;
    }
  }
  m.unsharded_weights = transient_peak(
      plan, [](const PlanBuffer& b) { return b.role == BufferRole::unsharded_weight; });
  m.unsharded_grads = transient_peak(plan, [](const PlanBuffer& b) {
    return b.role == BufferRole::unsharded_grad || b.role == BufferRole::accumulated_grad;
  });
  m.activations = transient_peak(plan, [](const PlanBuffer& b) {
    return b.role == BufferRole::activations || b.role == BufferRole::recompute_activations ||
           b.role == BufferRole::workspace || b.role == BufferRole::reloaded_activations;
  });
  m.fp8_transpose_cache = transient_peak(
      plan, [](const PlanBuffer& b) { return b.role == BufferRole::fp8_transpose_cache; });
  m.comm_buffers = transient_peak(plan, [](const PlanBuffer& b) { return is_comm_buffer(b.role); });
  m.pool_bytes = static_cast<double>(plan.pool.size_bytes);
  m.pool_lower_bound_bytes = static_cast<double>(plan.pool.lower_bound_bytes);
  m.non_tensor = static_cast<double>(plan.non_tensor_bytes);
  const MemoryReplay replay = replay_memory(plan);
  m.peak_allocated = static_cast<double>(replay.peak_allocated);
  m.peak_reserved = static_cast<double>(replay.peak_reserved);
  m.cache_releases = replay.cache_releases;
  // Whole byte counts below 2^53: the total comes back exact.
  m.transient = m.peak_reserved - m.non_tensor -
                (m.model_weights + m.main_weights + (m.main_grads_transient ? 0.0 : m.main_grads) +
                 m.optimizer_states + m.double_buffers);
  settle_memory_totals(m, m.transient, static_cast<double>(plan.capacity_bytes));
  if (m.total != m.peak_reserved || m.fits != replay.fits)
    throw std::logic_error("plan_memory: the breakdown does not add up to the replay's peak");
  return m;
}

nlohmann::json plan_memory_to_json(const PlanMemory& m) {
  return {{"model_weights_bytes", m.model_weights},
          {"main_weights_bytes", m.main_weights},
          {"main_grads_bytes", m.main_grads},
          {"optimizer_states_bytes", m.optimizer_states},
          {"double_buffers_bytes", m.double_buffers},
          {"unsharded_weights_peak_bytes", m.unsharded_weights},
          {"unsharded_grads_peak_bytes", m.unsharded_grads},
          {"activations_peak_bytes", m.activations},
          {"fp8_transpose_cache_peak_bytes", m.fp8_transpose_cache},
          {"comm_buffers_peak_bytes", m.comm_buffers},
          {"pool_bytes", m.pool_bytes},
          {"pool_lower_bound_bytes", m.pool_lower_bound_bytes},
          {"non_tensor_bytes", m.non_tensor},
          {"transient_bytes", m.transient},
          {"peak_allocated_bytes", m.peak_allocated},
          {"peak_reserved_bytes", m.peak_reserved},
          {"cache_releases", m.cache_releases},
          {"total_bytes", m.total},
          {"capacity_bytes", m.capacity},
          {"headroom_bytes", m.headroom},
          {"fits", m.fits},
          {"largest_term", m.largest_term}};
}

}  // namespace shardplan
