#pragma once

#include <memory>

#include "executor/replay.h"

namespace shardplan {

// The plan on GPUs: cudaMalloc'd pool and persistent buffers, one CUDA stream per plan
// stream with events for dependencies, NCCL all-gather / reduce-scatter / all-reduce on
// the planned buffers (one communicator per group, ids broadcast over MPI when MPI runs),
// compute ops as one bf16 cuBLAS GEMM with the op's FLOPs, the optimizer step as a
// memory-bound pass over the local fp32 shard, NVTX ranges named after the ops; op times
// from CUDA events. Throws InputError("no CUDA device: ...") on a machine without one.
// `mpi` says whether MPI is initialised (several ranks).
std::unique_ptr<ExecutorBackend> make_cuda_backend(bool mpi);

}  // namespace shardplan
