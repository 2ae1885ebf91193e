#pragma once

#include <cstdint>
#include <optional>

namespace shardplan {

// The smallest multiple of `multiple` at or above `value` (value ≥ 0, multiple > 0):
// padding to shard boundaries and offsets to alignments.
inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// a + b and a × b, or nullopt where the result leaves int64: sums and products of values
// read from files (a buffer's offset plus its bytes, a group's size times its stride),
// checked before anything relies on them.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

}  // namespace shardplan
