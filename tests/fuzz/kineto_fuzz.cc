// A Kineto Chrome trace (JSON or gzip) -> the importer: step choice, module order,
// collectives, memory curve. The importer reads files, so the input goes to one.
#include <unistd.h>

#include <fstream>
#include <string>

#include "fuzz_support.h"
#include "traces/trace_import.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/tmp/shardplan-kineto-fuzz-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  static const auto importer = make_kineto_importer();
  return fuzz::guarded([&] {
    const ImportedTrace imported = importer->import(path, {});
    fuzz::require(imported.event_seconds.size() == imported.trace.events.size(),
                  "one GPU time per trace event");
    imported_trace_to_json(imported).dump();
  });
}
