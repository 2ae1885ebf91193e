#include "planner/memory_breakdown.h"

#include <utility>
#include <vector>

namespace shardplan {

void settle_memory_totals(MemoryBreakdown& m, std::optional<double> transient, double capacity) {
  const std::vector<std::pair<const char*, double>> terms = {
      {"model weights", m.model_weights},
      {"main weights", m.main_weights},
      {"main grads", m.main_grads},
      {"optimizer states", m.optimizer_states},
      {"double buffers", m.double_buffers},
      {"unsharded weights", m.unsharded_weights},
      {"unsharded grads", m.unsharded_grads},
      {"activations", m.activations},
      {"fp8 transpose cache", m.fp8_transpose_cache},
      {"tp/cp/ep buffers", m.comm_buffers},
      {"non-tensor", m.non_tensor}};
  double largest = -1;
  for (const auto& [name, bytes] : terms) {
    if (bytes > largest) {
      largest = bytes;
      m.largest_term = name;
    }
  }
  if (transient) {
    m.total = m.model_weights + m.main_weights + (m.main_grads_transient ? 0.0 : m.main_grads) +
              m.optimizer_states + m.double_buffers + *transient + m.non_tensor;
  } else {
    m.total = 0;
    for (const auto& term : terms) m.total += term.second;
  }
  m.capacity = capacity;
  m.headroom = m.capacity - m.total;
  m.fits = m.headroom >= 0;
}

}  // namespace shardplan
