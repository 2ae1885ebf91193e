#pragma once

// The C interface between the executor and the CUDA plugin (executor/cuda_plugin.cc),
// kept to plain types so the plugin can be loaded with dlopen.
extern "C" {

struct ShardplanCudaProbeResult {
  int runtime_version;
  int nccl_version;
  int cublas_version;
  int device_count;
  char device_error[256];
};

// Fills `result`; returns 0.
int shardplan_cuda_probe(ShardplanCudaProbeResult* result);
}

namespace shardplan {
inline constexpr const char* kCudaPluginFile = "libshardplan_cuda.so";
inline constexpr const char* kCudaProbeSymbol = "shardplan_cuda_probe";
}  // namespace shardplan
