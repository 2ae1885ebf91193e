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
std::unique_ptr<ExecutorBackend> make_cpu_backend(const ReplayOptions& options);

}  // namespace shardplan
