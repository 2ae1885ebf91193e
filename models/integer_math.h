#pragma once

#include <cstdint>

namespace shardplan {

// The smallest multiple of `multiple` at or above `value` (value ≥ 0, multiple > 0):
// padding to shard boundaries and offsets to alignments.
inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace shardplan
