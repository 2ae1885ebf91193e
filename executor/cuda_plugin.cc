// The CUDA side of the executor, built into libshardplan_cuda.so against the CUDA
// runtime, cuBLAS, NCCL and NVTX3, and loaded by dlopen.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#include "executor/cuda_plugin_abi.h"

extern "C" int shardplan_cuda_probe(ShardplanCudaProbeResult* result) {
  *result = ShardplanCudaProbeResult{};
  cudaRuntimeGetVersion(&result->runtime_version);
  ncclGetVersion(&result->nccl_version);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  result->cublas_version = major * 10000 + minor * 100 + patch;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) {
    result->device_count = count;
  } else if (status == cudaSuccess) {
    std::snprintf(result->device_error, sizeof result->device_error,
                  "the driver reports 0 devices");
  } else {
    std::snprintf(result->device_error, sizeof result->device_error, "%s (%s)",
                  cudaGetErrorString(status), cudaGetErrorName(status));
  }
  return 0;
}
