#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traces/step_trace.h"
#include "traces/timeline.h"

namespace shardplan {

struct ImportOptions {
  std::string step;   // "ProfilerStep#K" or just "K"; empty = the last step
  int64_t depth = 0;  // levels below the first branching module level to trace (module ranges)
};

// One collective as it ran on the GPU.
struct ImportedCollective {
  std::string kind;          // all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, ...
  int64_t in_elements = -1;  // -1 when the trace does not say
  int64_t out_elements = -1;
  int64_t group_size = -1;
  std::string dtype;
  double bytes = 0;  // as nccl-tests counts them: the larger of in and out; 0 when unknown
  int64_t stream = -1;
  double start_seconds = 0;  // from the step's first GPU activity
  double duration_seconds = 0;
  std::string module;  // traced module whose forward/backward launched it; "" if none
  std::string phase;   // forward, backward, recompute, optimizer_step, other
};

// The step's GPU time on compute (not communication) by kernel class, from each kernel's
// full name (classify_kernel): what calibration fits a cluster's efficiencies to.
enum class KernelClass { gemm, fp8_gemm, attention, optimizer, elementwise };
struct KernelClassSeconds {
  double gemm = 0;         // cuBLAS / CUTLASS / hipBLASLt matmuls in bf16, fp16 or fp32
  double fp8_gemm = 0;     // the same with FP8 (e4m3 / e5m2) operands
  double attention = 0;    // fused attention (FlashAttention, cuDNN SDPA, fmha, Triton attn)
  double optimizer = 0;    // kernels launched in the optimizer's step, or named for one
  double elementwise = 0;  // every other kernel: norms, activations, casts, reductions
  double copies = 0;       // memcpy and memset activities (not kernels)

  double& of(KernelClass c) {
    switch (c) {
      case KernelClass::gemm:
        return gemm;
      case KernelClass::fp8_gemm:
        return fp8_gemm;
      case KernelClass::attention:
        return attention;
      case KernelClass::optimizer:
        return optimizer;
      default:
        return elementwise;
    }
  }
};
// The class of a compute kernel by its full (demangled) name; lower-case matching of
// vendor names: "flash", "fmha", "sdpa", "attn", "attention" -> attention; "gemm", "xmma",
// "nvjet", "cutlass", "cublas", "cijk_", "wgmma", "gemv" -> a GEMM (FP8 with "e4m3",
// "e5m2" or "fp8" in it); "adam", "sgd", "lamb" -> optimizer; anything else ->
// elementwise. The importer also counts every kernel launched inside the optimizer's step
// (Optimizer.step#...) as optimizer work: foreach kernels (multi_tensor_apply) serve
// FSDP2's copy-ins as well as the optimizer, so only the phase tells them apart.
KernelClass classify_kernel(std::string_view full_name);

// GPU time spent for a traced module (kernels, copies and sets launched on its behalf).
struct ModuleTime {
  double forward_seconds = 0;
  double backward_seconds = 0;
  double recompute_seconds = 0;
  int64_t kernels = 0;
};

// What an importer read from one step of a trace: the module order as a StepTrace, and the
// measured step (GPU ops, collectives, memory) as a Timeline.
struct ImportedTrace {
  std::string file;
  std::string format;              // the importer's name ("kineto")
  std::vector<std::string> steps;  // profiler steps present ("ProfilerStep#4", ...)
  std::string step;                // the one imported
  std::string module_source;       // what gave the module order (fsdp ranges, nn.Module, ...)
  StepTrace trace;                 // the module order and events, as the trace ran them
  // When the GPU reached each trace event: seconds from the step's first GPU activity to
  // the start of the last GPU work launched before the event ran on the host.
  std::vector<double> event_seconds;
  std::vector<ModuleTime> module_times;  // per trace.modules entry
  std::vector<ImportedCollective> collectives;
  KernelClassSeconds kernel_seconds;  // compute kernels' time by class
  Timeline timeline;                  // source "profiled": ops are the step's GPU activities
  std::vector<std::string> warnings;  // what the trace lacks, said instead of guessed
};

// One way to read a recorded step (Kineto Chrome traces now; Chakra execution traces or
// Nsight Systems exports would be others).
class TraceImporter {
 public:
  virtual ~TraceImporter() = default;
  virtual std::string name() const = 0;
  virtual ImportedTrace import(const std::string& path, const ImportOptions& options) const = 0;
};

// Kineto Chrome traces (PyTorch profiler export_chrome_trace / tensorboard_trace_handler).
std::unique_ptr<TraceImporter> make_kineto_importer();

// "kineto", or "auto" (by the file's first bytes: a Chrome trace is a JSON object with
// "traceEvents"). Unknown name or unrecognised file: InputError.
std::unique_ptr<TraceImporter> make_trace_importer(const std::string& format,
                                                   const std::string& path);

nlohmann::json imported_trace_to_json(const ImportedTrace& imported);

}  // namespace shardplan
