#pragma once

#include <memory>

#include "executor/replay.h"

namespace shardplan {

// Host memory, MPI collectives and Eigen GEMMs: a plan replayed on CPUs with checks on
// real data. Weight shards hold values computed from (buffer, element), so an all-gather
// must rebuild every rank's shard exactly; gradients are deterministic per rank, and a
// reduction must equal the sum over ranks (checked against the gathered inputs); every
// transient buffer is fingerprinted when written and checked at each read, so a buffer
// that another overwrote (shared pool bytes) or one read before its write is caught. A
// failure throws IntegrityError naming the op, the buffer and the byte offset.
// MPI must be initialised; the backend uses MPI_COMM_WORLD.
//
// Before anything runs it refuses (InputError, check_plan) a plan beyond its limits: a
// reduced matmul whose operands exceed kMaxGemmBytes, more than kMaxStepFlops of reduced
// matmuls per step, or a collective on a buffer past MPI's int counts.
std::unique_ptr<ExecutorBackend> make_cpu_backend(const ReplayOptions& options);

namespace cpu_backend_limits {
// Matmul FLOPs one step runs after --compute-scale: 10^12, about 30 s on one core (Eigen's
// single-precision GEMM ran at 30 GFLOP/s on one core of the 2-core development machine,
// 512 to 2048 square). Far above a real plan at the default scale (Llama 3.1 405B on one
// GPU, 8192 tokens: 2 · 10^10), far below the 600 s watchdog.
inline constexpr double kMaxStepFlops = 1e12;
// One reduced matmul's operands, A, B and C in fp32: 1 GiB.
inline constexpr double kMaxGemmBytes = 0x1p30;
// Bytes of a buffer a collective moves: MPI counts are int.
inline constexpr int64_t kMaxCollectiveBufferBytes = 2147483647;
}  // namespace cpu_backend_limits

// The matmul the CPU backend runs for `shape`: each dimension shrunk by the cube root of
// `compute_scale` (and at least 1), so its FLOPs shrink by about the scale.
GemmShape cpu_reduced_gemm(const GemmShape& shape, double compute_scale);

}  // namespace shardplan
