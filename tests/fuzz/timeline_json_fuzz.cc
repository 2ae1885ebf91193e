// Timeline JSON (simulate --timeline-out, execute -o, trace import --timeline) -> read,
// write back and read again; the Chrome trace view of it.
#include "fuzz_support.h"
#include "models/json_reader.h"
#include "traces/timeline.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const Timeline timeline =
        timeline_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    const Timeline again = timeline_from_json(timeline_to_json(timeline), "written");
    fuzz::require(again.ops.size() == timeline.ops.size(), "a written timeline reads back");
    chrome_trace(timeline).dump();
  });
}
