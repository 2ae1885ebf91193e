#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace shardplan {

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

// Hashes std::string and std::string_view alike, so the pool is searched without a copy.
struct StringPoolHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
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
  nlohmann::json metadata = nlohmann::json::object();  // every top-level key but traceEvents
  std::vector<KinetoEvent> events;                     // in file order
  bool has_trace_events = false;                       // a "traceEvents" array was present
  int64_t events_without_time = 0;  // complete or instant events with no "ts": dropped
};

// Reads a Kineto Chrome-trace JSON file, gzipped or not (zlib reads both), streaming: one
// event is held as JSON at a time, so files of hundreds of MB need only the compact events.
// Not JSON, truncated gzip, no "traceEvents" array: InputError naming the file.
KinetoTrace read_kineto_trace(const std::string& path);

// The first `max_bytes` of the file, decompressed: enough to tell a format by its keys.
std::string read_file_prefix(const std::string& path, std::size_t max_bytes);

}  // namespace shardplan
