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

// ---- the replay

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

struct Context {
  int device = 0;
  cudaStream_t streams[kCudaStreams] = {};
  cublasHandle_t blas = nullptr;
  ncclComm_t world = nullptr;                // the parent of every group's communicator
  std::vector<ncclComm_t> comms;             // one per plan process group; null for a single rank
  std::vector<int> group_ranks, group_rank;  // each group's size and this rank's place
  cudaEvent_t step_start = nullptr;
  std::vector<cudaEvent_t> starts, ends;
  std::vector<char> ran;
  std::vector<void*> allocations;
  std::vector<void*> host_allocations;
  void* gemm_scratch = nullptr;  // A, B, C of the largest GEMM
  long long gemm_scratch_bytes = 0;
};

bool failed(cudaError_t status, const char* what, const char* file, int line,
            ShardplanCudaError* error) {
  if (status == cudaSuccess) return false;
  std::snprintf(error->message, sizeof error->message, "%s:%d: %s: %s (%s)", file, line, what,
                cudaGetErrorString(status), cudaGetErrorName(status));
  return true;
}

bool failed(ncclResult_t status, const char* what, const char* file, int line,
            ShardplanCudaError* error) {
  if (status == ncclSuccess) return false;
  std::snprintf(error->message, sizeof error->message, "%s:%d: %s: %s", file, line, what,
                ncclGetErrorString(status));
  return true;
}

bool failed(cublasStatus_t status, const char* what, const char* file, int line,
            ShardplanCudaError* error) {
  if (status == CUBLAS_STATUS_SUCCESS) return false;
  std::snprintf(error->message, sizeof error->message, "%s:%d: %s: cuBLAS status %d", file, line,
                what, static_cast<int>(status));
  return true;
}

// Every CUDA, cuBLAS and NCCL call goes through FAILED: a failure records the call, file
// and line in `error` (nccl-tests' NCCLCHECK); the executor adds the rank and ends the job.
#define FAILED(call) failed((call), #call, __FILE__, __LINE__, error)

ncclDataType_t nccl_type(int element_bytes) {
  switch (element_bytes) {
    case 1:
      return ncclUint8;
    case 2:
      return ncclBfloat16;
    case 8:
      return ncclFloat64;
    default:
      return ncclFloat32;
  }
}

}  // namespace

extern "C" int shardplan_cuda_unique_id(void* id128, ShardplanCudaError* error) {
  ncclUniqueId id;
  if (FAILED(ncclGetUniqueId(&id))) return 1;
  std::memcpy(id128, &id, sizeof id);
  return 0;
}

extern "C" int shardplan_cuda_open(int device, int world_ranks, int world_rank,
                                   const void* world_id, int num_ops, int num_groups,
                                   const ShardplanCudaGroup* groups, void** context,
                                   ShardplanCudaError* error) {
  auto* c = new Context();
  *context = c;
  c->device = device;
  if (FAILED(cudaSetDevice(device))) return 1;
  for (cudaStream_t& s : c->streams) {
    if (FAILED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) return 1;
  }
  if (FAILED(cublasCreate(&c->blas))) return 1;
  c->comms.assign(static_cast<std::size_t>(num_groups), nullptr);
  for (int g = 0; g < num_groups; ++g) {
    c->group_ranks.push_back(groups[g].ranks);
    c->group_rank.push_back(groups[g].rank);
  }
  if (world_ranks > 1) {
    ncclUniqueId id;
    std::memcpy(&id, world_id, sizeof id);
    if (FAILED(ncclCommInitRank(&c->world, world_ranks, id, world_rank))) return 1;
    static_assert(sizeof(ncclUniqueId) == 128);
    // ncclCommSplit is collective over the parent. `ranks` is the same on every rank for
    // a group, so all skip the single-rank ones together.
    for (int g = 0; g < num_groups; ++g) {
      if (groups[g].ranks <= 1) continue;
      if (FAILED(ncclCommSplit(c->world, groups[g].color, groups[g].rank,
                               &c->comms[static_cast<std::size_t>(g)], nullptr)))
        return 1;
    }
  }
  if (FAILED(cudaEventCreate(&c->step_start))) return 1;
  c->starts.resize(static_cast<std::size_t>(num_ops));
  c->ends.resize(static_cast<std::size_t>(num_ops));
  c->ran.assign(static_cast<std::size_t>(num_ops), 0);
  for (int i = 0; i < num_ops; ++i) {
    if (FAILED(cudaEventCreate(&c->starts[static_cast<std::size_t>(i)])) ||
        FAILED(cudaEventCreate(&c->ends[static_cast<std::size_t>(i)])))
      return 1;
  }
  return 0;
}

extern "C" int shardplan_cuda_alloc(void* context, long long bytes, void** data,
                                    ShardplanCudaError* error) {
  auto* c = static_cast<Context*>(context);
  if (FAILED(cudaMalloc(data, static_cast<std::size_t>(std::max(bytes, 1LL))))) return 1;
  c->allocations.push_back(*data);
  if (FAILED(cudaMemset(*data, 0, static_cast<std::size_t>(std::max(bytes, 1LL))))) return 1;
  return 0;
}

extern "C" int shardplan_cuda_host_alloc(void* context, long long bytes, void** data,
                                         ShardplanCudaError* error) {
  auto* c = static_cast<Context*>(context);
  if (FAILED(cudaMallocHost(data, static_cast<std::size_t>(std::max(bytes, 1LL))))) return 1;
  c->host_allocations.push_back(*data);
  return 0;
}

extern "C" int shardplan_cuda_begin_step(void* context, ShardplanCudaError* error) {
  auto* c = static_cast<Context*>(context);
  std::fill(c->ran.begin(), c->ran.end(), 0);
  // Every stream starts after the step's start event, so op times share its origin.
  if (FAILED(cudaDeviceSynchronize())) return 1;
  if (FAILED(cudaEventRecord(c->step_start, c->streams[0]))) return 1;
  for (int s = 1; s < kCudaStreams; ++s) {
    if (FAILED(cudaStreamWaitEvent(c->streams[s], c->step_start, 0))) return 1;
  }
  return 0;
}

namespace {

// One NCCL collective of the op; false (and `error` set) when NCCL fails. Send/recv is a
// ring shift (to the next rank, from the previous: context parallelism's K/V ring, as
// nccl-tests' sendrecv); all-to-all one send and one receive per peer (NCCL has no
// all-to-all call: nccl-tests' alltoall does the same), both inside one NCCL group.
bool collective(const ShardplanCudaOp* op, ncclComm_t comm, int ranks, int rank,
                cudaStream_t stream, ShardplanCudaError* error) {
  if (op->count <= 0) return true;
  if (op->kind == kCudaSendRecv || op->kind == kCudaAllToAll) {
    const auto count = static_cast<std::size_t>(op->count);
    auto* in = static_cast<char*>(op->input);
    auto* out = static_cast<char*>(op->output);
    if (FAILED(ncclGroupStart())) return false;
    if (op->kind == kCudaSendRecv) {
      if (FAILED(ncclSend(in, count, ncclUint8, (rank + 1) % ranks, comm, stream)) ||
          FAILED(ncclRecv(out, count, ncclUint8, (rank + ranks - 1) % ranks, comm, stream)))
        return false;
    } else {
      for (int peer = 0; peer < ranks; ++peer) {
        const std::size_t at = static_cast<std::size_t>(peer) * count;
        if (FAILED(ncclSend(in + at, count, ncclUint8, peer, comm, stream)) ||
            FAILED(ncclRecv(out + at, count, ncclUint8, peer, comm, stream)))
          return false;
      }
    }
    return !FAILED(ncclGroupEnd());
  }
  const ncclDataType_t type = op->kind == kCudaAllGather ? ncclUint8 : nccl_type(op->element_bytes);
  const auto count = static_cast<std::size_t>(op->count);
  if (op->kind == kCudaAllGather) {
    return !FAILED(ncclAllGather(op->input, op->output, count, type, comm, stream));
  }
  if (op->kind == kCudaReduceScatter) {
    return !FAILED(ncclReduceScatter(op->input, op->output, count, type, ncclSum, comm, stream));
  }
  return !FAILED(ncclAllReduce(op->input, op->output, count, type, ncclSum, comm, stream));
}

}  // namespace

extern "C" int shardplan_cuda_run(void* context, const ShardplanCudaOp* op,
                                  ShardplanCudaError* error) {
  auto* c = static_cast<Context*>(context);
  cudaStream_t stream = c->streams[op->stream];
  for (int d = 0; d < op->num_deps; ++d) {
    if (FAILED(cudaStreamWaitEvent(stream, c->ends[static_cast<std::size_t>(op->deps[d])], 0)))
      return 1;
  }
  nvtxRangePushA(op->name);
  const auto i = static_cast<std::size_t>(op->id);
  if (op->part == 0 && FAILED(cudaEventRecord(c->starts[i], stream))) return 1;
  switch (op->kind) {
    case kCudaCompute: {
      if (FAILED(cublasSetStream(c->blas, stream))) return 1;
      std::vector<long long> shapes(op->gemms, op->gemms + 3 * op->num_gemms);
      // FLOPs without shapes (and attention) run as square GEMMs of as many FLOPs.
      for (double flops : {op->num_gemms == 0 ? op->gemm_flops : 0.0, op->attention_flops}) {
        if (flops <= 0) continue;
        const long long n =
            std::max(16LL, static_cast<long long>(std::cbrt(flops / 2.0) / 16) * 16);
        shapes.insert(shapes.end(), {n, n, n});
      }
      long long need = 0;
      for (std::size_t g = 0; g + 2 < shapes.size(); g += 3) {
        const long long m = shapes[g], n = shapes[g + 1], k = shapes[g + 2];
        need = std::max(need, (m * k + k * n + m * n) * 2);
      }
      need = std::max(need, op->memory_bytes);
      if (need > c->gemm_scratch_bytes) {
        if (c->gemm_scratch != nullptr) cudaFree(c->gemm_scratch);
        if (FAILED(cudaMalloc(&c->gemm_scratch, static_cast<std::size_t>(need)))) return 1;
        cudaMemset(c->gemm_scratch, 0, static_cast<std::size_t>(need));
        c->gemm_scratch_bytes = need;
      }
      auto* base = static_cast<char*>(c->gemm_scratch);
      const float alpha = 1.0f, beta = 0.0f;
      for (std::size_t g = 0; g + 2 < shapes.size(); g += 3) {
        const long long m = shapes[g], n = shapes[g + 1], k = shapes[g + 2];
        char* a_ = base;              // m × k
        char* b_ = base + m * k * 2;  // k × n
        char* c_ = b_ + k * n * 2;    // m × n
        // Row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ.
        if (FAILED(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, b_, CUDA_R_16BF,
                                static_cast<int>(n), a_, CUDA_R_16BF, static_cast<int>(k), &beta,
                                c_, CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT)))
          return 1;
      }
      // The memory-bound kernels: read and write `memory_bytes` in all.
      const long long copy_bytes = op->memory_bytes / 2;
      if (copy_bytes > 0 && FAILED(cudaMemcpyAsync(base + (op->memory_bytes - copy_bytes), base,
                                                   static_cast<std::size_t>(copy_bytes),
                                                   cudaMemcpyDeviceToDevice, stream)))
        return 1;
      break;
    }
    case kCudaOptimizer: {
      // Memory-bound over the local shard: read and write every fp32 element once.
      if (FAILED(cublasSetStream(c->blas, stream))) return 1;
      const float one = 1.0f;
      if (op->count > 0 &&
          FAILED(cublasSscal(c->blas, static_cast<int>(std::min(op->count, 2147483647LL)), &one,
                             static_cast<float*>(op->output), 1)))
        return 1;
      break;
    }
    case kCudaCopy:
      // Activation offload: copy engines over the host link, pinned memory on the host side.
      if (op->count > 0 &&
          FAILED(cudaMemcpyAsync(op->output, op->input, static_cast<std::size_t>(op->count),
                                 cudaMemcpyDefault, stream)))
        return 1;
      break;
    case kCudaAllGather:
    case kCudaReduceScatter:
    case kCudaAllReduce:
    case kCudaSendRecv:
    case kCudaAllToAll: {
      if (op->group < 0 || op->group >= static_cast<int>(c->comms.size())) {
        std::snprintf(error->message, sizeof error->message, "op %lld names process group %d",
                      op->id, op->group);
        return 1;
      }
      // PyTorch FSDP's copy-in, one rank too: the shard cast into this rank's slice before
      // the gather in place. The replay checks no values on the GPU, so a contiguous device
      // copy of the slice's bytes from the shard stands in for the cast kernel (it moves 4
      // of the cast's 6 bytes per bf16 element; a strided cudaMemcpy2D of each element's
      // top bytes, measured on an H200, crawls at 3 GB/s).
      if (op->cast_bytes > 0 && FAILED(cudaMemcpyAsync(op->input, op->cast_source,
                                                       static_cast<std::size_t>(op->cast_bytes),
                                                       cudaMemcpyDeviceToDevice, stream)))
        return 1;
      ncclComm_t comm = c->comms[static_cast<std::size_t>(op->group)];
      if (comm == nullptr) break;  // one rank: nothing to move
      // The parts of one op (one per parameter group, or bucket) form one NCCL group, one
      // launch, as Megatron-FSDP's _coalescing_manager issues a unit's buckets; the
      // simulator charges the op one collective's latency for the same reason.
      const bool coalesced = op->parts > 1;
      if (coalesced && op->part == 0 && FAILED(ncclGroupStart())) return 1;
      const auto g = static_cast<std::size_t>(op->group);
      if (!collective(op, comm, c->group_ranks[g], c->group_rank[g], stream, error)) return 1;
      if (coalesced && op->part == op->parts - 1 && FAILED(ncclGroupEnd())) return 1;
      break;
    }
    default:
      break;
  }
  if (op->part == op->parts - 1) {
    if (FAILED(cudaEventRecord(c->ends[i], stream))) return 1;
    c->ran[i] = 1;
  }
  nvtxRangePop();
  return 0;
}

extern "C" int shardplan_cuda_end_step(void* context, double* start, double* end,
                                       ShardplanCudaError* error) {
  auto* c = static_cast<Context*>(context);
  if (FAILED(cudaDeviceSynchronize())) return 1;
  for (std::size_t i = 0; i < c->ran.size(); ++i) {
    start[i] = end[i] = -1;
    if (!c->ran[i]) continue;
    float a = 0, b = 0;
    if (FAILED(cudaEventElapsedTime(&a, c->step_start, c->starts[i])) ||
        FAILED(cudaEventElapsedTime(&b, c->step_start, c->ends[i])))
      return 1;
    start[i] = a / 1e3;
    end[i] = b / 1e3;
  }
  return 0;
}

extern "C" int shardplan_cuda_memory(void* context, long long* free_bytes, long long* total_bytes,
                                     ShardplanCudaError* error) {
  (void)context;
  std::size_t f = 0, t = 0;
  if (FAILED(cudaMemGetInfo(&f, &t))) return 1;
  *free_bytes = static_cast<long long>(f);
  *total_bytes = static_cast<long long>(t);
  return 0;
}

extern "C" void shardplan_cuda_close(void* context) {
  auto* c = static_cast<Context*>(context);
  if (c == nullptr) return;
  cudaDeviceSynchronize();
  for (ncclComm_t comm : c->comms)
    if (comm != nullptr) ncclCommDestroy(comm);
  if (c->world != nullptr) ncclCommDestroy(c->world);
  for (void* p : c->allocations) cudaFree(p);
  for (void* p : c->host_allocations) cudaFreeHost(p);
  if (c->gemm_scratch != nullptr) cudaFree(c->gemm_scratch);
  for (cudaEvent_t e : c->starts) cudaEventDestroy(e);
  for (cudaEvent_t e : c->ends) cudaEventDestroy(e);
  if (c->step_start != nullptr) cudaEventDestroy(c->step_start);
  if (c->blas != nullptr) cublasDestroy(c->blas);
  for (cudaStream_t s : c->streams)
    if (s != nullptr) cudaStreamDestroy(s);
  delete c;
}
