#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "models/error.h"

namespace shardplan::testing {

// Runs `action`, which must throw InputError naming `field` (exactly) with a reason that
// contains `reason`, and `file` when it is given.
template <typename Action>
void expect_input_error(Action&& action, std::string_view field, std::string_view reason,
                        std::string_view file = {}) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one at " << field;
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    if (!file.empty()) {
      EXPECT_EQ(e.file(), file) << e.what();
    }
  }
}

}  // namespace shardplan::testing
