#pragma once

// Shared by the libFuzzer targets: each feeds arbitrary bytes to one reader and then to
// what consumes its result. An InputError is the reader doing its job; anything else
// that escapes (another exception, a sanitizer report, a broken invariant) is a bug that
// libFuzzer reports as a crash with the input that caused it.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "models/error.h"

namespace shardplan::fuzz {

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; only InputError may leave it.
template <typename Body>
int guarded(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
  }
  return 0;
}

inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

inline bool finite_non_negative(double x) {
  return std::isfinite(x) && x >= 0;
}

}  // namespace shardplan::fuzz
