// Timeline JSON (simulate --timeline-out, execute -o, trace import --timeline) -> read,
// write back and read again; the Chrome trace view of it. Every time read is a time
// within a step of at most a day.
#include "fuzz_support.h"
#include "models/json_reader.h"
#include "traces/timeline.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const Timeline timeline =
        timeline_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    fuzz::require(timeline.summary.step_seconds <= kMaxStepSeconds, "a step of at most a day");
    for (const TimelineOp& op : timeline.ops) {
      fuzz::require(
          fuzz::finite_non_negative(op.start) && op.start <= op.end && op.end <= kMaxStepSeconds,
          "ops start before they end, within a day");
    }
    const Timeline again = timeline_from_json(timeline_to_json(timeline), "written");
    fuzz::require(again.ops.size() == timeline.ops.size(), "a written timeline reads back");
    chrome_trace(timeline).dump();
  });
}
