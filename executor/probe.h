#pragma once

#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>

namespace shardplan {

struct ProbeOptions {
  double min_bytes = 1024;
  double max_bytes = 64.0 * (1 << 20);
  int warmup = 2;
  int iterations = 5;
};

// Measures every collective shardplan models (all_gather, reduce_scatter, all_reduce,
// all_to_all, send_recv as a ring shift) over `world` and, when the ranks span several
// hosts, over each host's ranks, at sizes doubling from min_bytes to max_bytes in the
// nccl-tests conventions (simulator/collective_model.h): the time per call is the mean
// over `iterations` after `warmup`, the slowest rank's. Collective over `world`; rank 0's
// return value is the probe file (docs/formats.md "probe.json"), the others' are empty.
nlohmann::json run_cpu_probe(MPI_Comm world, const ProbeOptions& options);

}  // namespace shardplan
