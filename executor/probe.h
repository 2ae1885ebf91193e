#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/module_cost.h"

namespace shardplan {

// The collectives a probe measures, in its file's order (send_recv: a ring shift).
inline constexpr std::array<const char*, 5> kProbeCollectives = {
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv"};

// nccl-tests' message size for a requested `size` over `ranks`: whole floats per rank, at
// least one each.
int64_t probe_message_bytes(double size, int ranks);

// One collective's table in the probe file (docs/formats.md "probe.json").
nlohmann::json probe_table(const std::string& op, const std::string& group, int ranks,
                           int ranks_per_node, nlohmann::json rows);

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

// The same collectives with NCCL on this machine's GPUs (one per rank, in node order),
// through the CUDA plugin, each timed on the device by CUDA events around the op alone
// (no host launch gaps, unlike nccl-tests' wall clock); then, on each rank's GPU, bf16
// cuBLAS GEMMs of `gemms` and device copies of 64 MiB, 256 MiB and 1 GiB ("kernels" in
// the probe file; rank 0's). Throws InputError without a CUDA device or plugin.
nlohmann::json run_cuda_probe(MPI_Comm world, const ProbeOptions& options,
                              const std::vector<GemmShape>& gemms);

}  // namespace shardplan
