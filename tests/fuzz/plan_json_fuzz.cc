// plan.json -> read, validate and, for every plan that validates, what the commands do
// with it: simulate on its cluster and replay on the in-process fake backend
// (tests/executor/exercise_plan.h, which hostile_plan_test.cc runs in the normal build
// too). validate_plan's contract: a plan it accepts never crashes, hangs or gives an
// absurd number anywhere.
#include <cstdio>

#include "fuzz_support.h"
#include "models/json_reader.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "tests/executor/exercise_plan.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const Plan plan = plan_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    if (validate_plan(plan)) return;
    const std::optional<std::string> broken = testing::exercise_valid_plan(plan);
    if (broken) std::fprintf(stderr, "fuzz: %s\n", broken->c_str());
    fuzz::require(!broken, "a plan that validates simulates and replays sanely");
  });
}
