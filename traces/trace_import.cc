#include "traces/trace_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "models/error.h"
#include "traces/kineto_reader.h"

namespace shardplan {

KernelClass classify_kernel(std::string_view full_name) {
  std::string n(full_name);
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](std::string_view s) { return n.find(s) != std::string::npos; };
  // Attention first: FlashAttention-3 and cuDNN's SDPA are CUTLASS / xmma kernels too.
  if (has("flash") || has("fmha") || has("sdpa") || has("attn") || has("attention"))
    return KernelClass::attention;
  if (has("gemm") || has("xmma") || has("nvjet") || has("cutlass") || has("cublas") ||
      has("cijk_") || has("wgmma") || has("gemv")) {
    return has("e4m3") || has("e5m2") || has("fp8") ? KernelClass::fp8_gemm : KernelClass::gemm;
  }
  if (has("adam") || has("sgd") || has("lamb")) return KernelClass::optimizer;
  return KernelClass::elementwise;
}

std::unique_ptr<TraceImporter> make_trace_importer(const std::string& format,
                                                   const std::string& path) {
  if (format == "kineto") return make_kineto_importer();
  if (format != "auto") {
    throw InputError("", "--format",
                     fmt::format("unknown trace format {} (kineto, auto)", quote_input(format)));
  }
  // A Chrome trace opens with an object whose keys include traceEvents (Kineto writes
  // schemaVersion and deviceProperties first), or is a bare array of events (the Trace
  // Event Format's JSON Array Format); anything else is not one we read.
  const std::string head = read_file_prefix(path, 1 << 16);
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    throw InputError(path, "",
                     head.empty() ? "the file is empty" : "the file holds only white space");
  }
  if (head[first] != '{' && head[first] != '[') {
    throw InputError(path, "",
                     "not JSON (a Chrome trace starts with '{' or '['; gzip is read as is)");
  }
  if (head.find("\"family\"") != std::string::npos &&
      head.find("\"traceEvents\"") == std::string::npos) {
    throw InputError(path, "", "a shardplan model file, not a profiler trace: pass it as --model");
  }
  return make_kineto_importer();
}

nlohmann::json imported_trace_to_json(const ImportedTrace& in) {
  nlohmann::json j = step_trace_to_json(in.trace);
  for (std::size_t i = 0; i < in.event_seconds.size() && i < j["events"].size(); ++i)
    j["events"][i]["time_seconds"] = in.event_seconds[i];
  nlohmann::json times = nlohmann::json::array();
  for (std::size_t m = 0; m < in.module_times.size(); ++m) {
    const ModuleTime& t = in.module_times[m];
    times.push_back({{"module", in.trace.modules[m]},
                     {"forward_seconds", t.forward_seconds},
                     {"backward_seconds", t.backward_seconds},
                     {"recompute_seconds", t.recompute_seconds},
                     {"kernels", t.kernels}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const ImportedCollective& c : in.collectives) {
    collectives.push_back({{"kind", c.kind},
                           {"in_elements", c.in_elements},
                           {"out_elements", c.out_elements},
                           {"group_size", c.group_size},
                           {"dtype", c.dtype},
                           {"bytes", c.bytes},
                           {"stream", c.stream},
                           {"start_seconds", c.start_seconds},
                           {"duration_seconds", c.duration_seconds},
                           {"module", c.module},
                           {"phase", c.phase}});
  }
  const TimelineSummary& s = in.timeline.summary;
  j["version"] = 1;
  j["source"] = {{"file", in.file},
                 {"format", in.format},
                 {"steps", in.steps},
                 {"step", in.step},
                 {"module_order_from", in.module_source}};
  j["module_times"] = std::move(times);
  j["collectives"] = std::move(collectives);
  j["measured"] = {{"step_seconds", s.step_seconds},
                   {"gpu_activities", in.timeline.ops.size()},
                   {"compute_seconds", s.compute_seconds},
                   {"exposed_all_gather_seconds", s.exposed_all_gather_seconds},
                   {"exposed_reduce_scatter_seconds", s.exposed_reduce_scatter_seconds},
                   {"memory_samples", in.timeline.memory.size()},
                   {"peak_allocated_bytes", s.peak_allocated_bytes},
                   {"peak_reserved_bytes", s.peak_reserved_bytes}};
  const KernelClassSeconds& k = in.kernel_seconds;
  j["kernel_seconds"] = {
      {"gemm", k.gemm},           {"fp8_gemm", k.fp8_gemm},       {"attention", k.attention},
      {"optimizer", k.optimizer}, {"elementwise", k.elementwise}, {"copies", k.copies}};
  j["warnings"] = in.warnings;
  return j;
}

}  // namespace shardplan
