#pragma once

// ../shared beside the clone holds real data nobody here wrote (benchmarks/: offset-
// assignment inputs; traces-real/: profiler traces; each folder's SOURCE.md). A fresh
// clone alone lacks it: the tests that read it skip and say why, and everything else
// still runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#define SHARDPLAN_SKIP_WITHOUT_SHARED()                                                     \
  do {                                                                                      \
    if (!std::filesystem::exists(SHARDPLAN_SHARED_DIR)) {                                   \
      GTEST_SKIP() << "needs the real data in " SHARDPLAN_SHARED_DIR                        \
                      " (../shared beside the clone: benchmarks/ and traces-real/), which " \
                      "is absent";                                                          \
    }                                                                                       \
  } while (0)
