#include "executor/cuda_probe.h"

#include <fmt/format.h>

#include "models/error.h"

#ifdef SHARDPLAN_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace shardplan {

CudaProbe probe_cuda() {
  CudaProbe probe;
#ifdef SHARDPLAN_WITH_CUDA
  probe.compiled = true;
  cudaRuntimeGetVersion(&probe.runtime_version);
  ncclGetVersion(&probe.nccl_version);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  probe.cublas_version = major * 10000 + minor * 100 + patch;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) {
    probe.device_count = count;
  } else {
    probe.device_error = status == cudaSuccess ? "the driver reports 0 devices"
                                               : fmt::format("{} ({})", cudaGetErrorString(status),
                                                             cudaGetErrorName(status));
  }
#else
  probe.device_error = "shardplan was built without the CUDA backend (SHARDPLAN_CUDA=OFF)";
#endif
  return probe;
}

void require_cuda_device() {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) {
    throw InputError("", "--backend cuda", "no CUDA device: " + probe.device_error);
  }
}

}  // namespace shardplan
