// A Kineto Chrome trace (JSON object or bare array, gzipped or not) -> the importer: step
// choice, module order, collectives, memory curve. The importer reads files, so the input
// goes to one. Whatever it accepts must be physically sane, read back as a timeline, and
// import the same when read twice keeping one step as when every event is kept.
#include <unistd.h>

#include <fstream>
#include <string>

#include "fuzz_support.h"
#include "models/limits.h"
#include "traces/kineto_passes.h"
#include "traces/trace_import.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/tmp/shardplan-kineto-fuzz-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  return fuzz::guarded([&] {
    const ImportedTrace imported = kineto::import_kineto(path, read_kineto_trace(path), {});
    fuzz::require(imported.event_seconds.size() == imported.trace.events.size(),
                  "one GPU time per trace event");
    const TimelineSummary& s = imported.timeline.summary;
    fuzz::require(s.step_seconds >= 0 && s.step_seconds <= kMaxStepSeconds,
                  "a step between 0 and a day");
    for (const ImportedCollective& c : imported.collectives) {
      fuzz::require(c.bytes >= 0 && c.bytes <= 8.0 * static_cast<double>(kMaxDeviceBytes),
                    "a collective's bytes within a GPU's memory");
      fuzz::require(c.group_size == -1 || (c.group_size >= 1 && c.group_size <= limits::kMaxGpus),
                    "a group of 1 to 2^20 ranks, or unknown");
    }
    const Timeline again = timeline_from_json(timeline_to_json(imported.timeline), "written");
    fuzz::require(again.ops.size() == imported.timeline.ops.size(),
                  "the imported timeline reads back");
    const std::string json = imported_trace_to_json(imported).dump();
    const ImportedTrace twice =
        kineto::import_kineto(path, kineto::read_step_events(path, "", /*keep_all_events=*/0), {});
    fuzz::require(imported_trace_to_json(twice).dump() == json,
                  "two reads keeping the step import what one read keeping all does");
  });
}
