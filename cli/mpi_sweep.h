#pragma once

#include "planner/sweep.h"

namespace shardplan {

// The batch evaluator of a sweep run under mpirun: rank r simulates positions r, r + K,
// ... of each batch (K ranks) on its threads, and MPI_Allgatherv hands every rank every
// summary, so each goes on to the same next batch and rank 0 reports what one process
// would. A rank whose evaluation fails aborts the job (the others would wait for it).
BatchEvaluator mpi_batch_evaluator(int rank, int ranks);

// Threads per rank when none are asked for: the cores shared by the ranks on this node.
int threads_per_rank();

}  // namespace shardplan
