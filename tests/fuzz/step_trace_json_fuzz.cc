// Step trace JSON (plan --step-trace: trace import -o files, plan_step_trace's output) ->
// read, write back and read again.
#include "fuzz_support.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "traces/step_trace.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const StepTrace trace =
        step_trace_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    fuzz::require(static_cast<int64_t>(trace.modules.size()) * trace.grad_accum <=
                      limits::kMaxUnitMicroBatches,
                  "modules × micro-batches within a plan's bound");
    const StepTrace again = step_trace_from_json(step_trace_to_json(trace), "written");
    fuzz::require(again.events.size() == trace.events.size() && again.modules == trace.modules,
                  "a written step trace reads back");
  });
}
