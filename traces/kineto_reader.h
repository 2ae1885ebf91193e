#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "models/limits.h"
#include "traces/timeline.h"

namespace shardplan {

// Bounds on what one Kineto trace may hold; a value outside them cannot come from a real
// profile, and is set aside as the reader's notes say (docs/formats.md, Limits).
//
// Decompressed bytes of one trace. Perfetto's in-browser UI, the viewer people open these
// files with, holds about 2 GB in all (perfetto.dev, "Visualising large traces") and
// chrome://tracing 256 MB, so a trace worth profiling is far smaller; 8 GiB leaves 4x
// over what any viewer opens. The reader keeps one step, not the file, so the bound is
// on time: an endless stream (a FIFO, a decompression bomb) ends at it with an error.
inline constexpr int64_t kMaxTraceBytes = int64_t{8} << 30;
// A time stamp (µs) must be finite and within ±2^53 µs (285 years): past that a double
// no longer holds whole microseconds.
inline constexpr double kMaxTraceMicroseconds = 0x1p53;
// A duration (µs): 0 to the longest step any reader accepts (a day); no single range or
// kernel of a step outlasts the step.
inline constexpr double kMaxEventMicroseconds = kMaxStepSeconds * 1e6;
// Bytes one collective moves or one allocator total holds: 16 TiB, the largest GPU memory
// (limits::kMaxGpuMemoryBytes, as a cluster file's hbm_bytes). Each element is at least a
// byte, so element counts share the bound, and elements × dtype size stays far inside
// int64.
inline constexpr int64_t kMaxDeviceBytes = limits::kMaxGpuMemoryBytes;

// One Chrome-trace event of a PyTorch profiler (Kineto) file, with only the fields and
// args the importer reads; absent numbers are -1.
// Strings are views into the KinetoTrace's pool: a trace repeats a few thousand names
// (kernels, ops) hundreds of thousands of times.
struct KinetoEvent {
  std::string_view name;
  std::string_view cat;
  char ph = 'X';             // X complete, i instant, s/f flow start/end, M metadata
  int64_t pid = -1;          // process (CPU) or device (GPU)
  int64_t tid = -1;          // thread (CPU) or stream (GPU); a string tid gets a negative id
  double ts = 0;             // microseconds
  double dur = 0;            // microseconds
  int64_t correlation = -1;  // links a kernel to the runtime call that launched it
  int64_t sequence = -1;     // autograd "Sequence number": forward op <-> backward op
  int64_t flow_id = -1;      // fwdbwd flows (the reader keeps no other flows)
  int64_t stream = -1;       // GPU stream (args.stream)
  // Collective metadata (record_param_comms and NCCL kernel args).
  std::string_view collective;  // "Collective name": allreduce, _allgather_base, ...
  int64_t in_elements = -1;
  int64_t out_elements = -1;
  int64_t group_size = -1;
  std::string_view dtype;
  // [memory] events.
  int64_t device_type = -1;  // 1 = CUDA, 0 = CPU
  int64_t bytes = 0;         // negative for a free
  int64_t total_allocated = -1;
  int64_t total_reserved = -1;
};

// Bytes per element of the dtype names PyTorch writes ("BFloat16", "Float", ...); 0 for a
// name this reader does not know.
int64_t dtype_size(std::string_view dtype);

// Hashes std::string and std::string_view alike, so the pool is searched without a copy.
struct StringPoolHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// What the reader set aside, counted, with the first case described for the warning
// ("event 12 'aten::mm': dur -5").
struct SetAside {
  int64_t count = 0;
  std::string first;
};

// Move-only: the events' string views point into `strings`, whose nodes a move keeps in
// place and a copy would not.
struct KinetoTrace {
  KinetoTrace() = default;
  KinetoTrace(KinetoTrace&&) = default;
  KinetoTrace& operator=(KinetoTrace&&) = default;
  KinetoTrace(const KinetoTrace&) = delete;
  KinetoTrace& operator=(const KinetoTrace&) = delete;

  // The one copy of each distinct string the events name.
  std::string_view intern(std::string_view text);

  std::unordered_set<std::string, StringPoolHash, std::equal_to<>> strings;
  // The top-level keys but traceEvents: every scalar, and of the objects and arrays those
  // the importer reads (distributedInfo, deviceProperties).
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<KinetoEvent> events;  // in file order
  bool has_trace_events = false;    // a "traceEvents" array (or a bare array of events)
  // Events left out for their time: a complete or instant event with no "ts", or any
  // event whose ts or dur is not a number, not finite, or outside the bounds above.
  SetAside events_without_time;
  // Values of the args above that are not whole numbers or lie outside their physical
  // range: read as absent (a size or total as unknown), so the warning about what the
  // trace lacks covers them.
  SetAside values_out_of_range;
};

// Decides, as each event is read, whether the trace keeps it. The event's strings are
// valid only during the call.
using KeepEvent = std::function<bool(const KinetoEvent&)>;

struct KinetoReadOptions {
  KeepEvent keep;                      // empty: keep every event
  int64_t max_bytes = kMaxTraceBytes;  // decompressed
};

// Reads a Kineto Chrome trace (the JSON object form {"traceEvents": [...]}, or the bare
// JSON array of events of the Trace Event Format, whose closing ']' may be missing),
// gzipped or not (zlib reads both), as a stream: each event is built straight from the
// parser's callbacks into a KinetoEvent and offered to `keep`, so memory holds only the
// events kept. A directory, not JSON (with the line and byte), a file that ends early,
// a corrupt or truncated gzip stream, more than `max_bytes`, no events array:
// InputError naming the file.
KinetoTrace read_kineto_trace(const std::string& path, const KinetoReadOptions& options = {});

// Whether `path` can be read a second time from its start (a regular file, not a pipe or
// a device).
bool can_read_twice(const std::string& path);

// The first `max_bytes` of the file, decompressed: enough to tell a format by its keys.
// A directory, an unreadable file or a corrupt gzip stream: InputError naming it.
std::string read_file_prefix(const std::string& path, std::size_t max_bytes);

}  // namespace shardplan
