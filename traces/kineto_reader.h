#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shardplan {

// One Chrome-trace event of a PyTorch profiler (Kineto) file, with only the fields and
// args the importer reads; absent numbers are -1.
struct KinetoEvent {
  std::string name;
  std::string cat;
  char ph = 'X';       // X complete, i instant, s/f flow start/end, M metadata
  int64_t pid = -1;    // process (CPU) or device (GPU)
  int64_t tid = -1;    // thread (CPU) or stream (GPU); a string tid gets a negative id
  double ts = 0;       // microseconds
  double dur = 0;      // microseconds
  int64_t correlation = -1;  // links a kernel to the runtime call that launched it
  int64_t sequence = -1;     // autograd "Sequence number": forward op <-> backward op
  int64_t flow_id = -1;      // fwdbwd flows (the reader keeps no other flows)
  int64_t stream = -1;       // GPU stream (args.stream)
  // Collective metadata (record_param_comms and NCCL kernel args).
  std::string collective;  // "Collective name": allreduce, _allgather_base, ...
  int64_t in_elements = -1;
  int64_t out_elements = -1;
  int64_t group_size = -1;
  std::string dtype;
  // [memory] events.
  int64_t device_type = -1;  // 1 = CUDA, 0 = CPU
  int64_t bytes = 0;         // negative for a free
  int64_t total_allocated = -1;
  int64_t total_reserved = -1;
};

struct KinetoTrace {
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
