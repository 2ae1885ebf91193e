#include "executor/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace shardplan {
namespace {

// One collective of `bytes` (nccl-tests' size) over `comm`, through MPI as the CPU
// backend replays it.
void run_once(const std::string& op, MPI_Comm comm, std::vector<char>& in, std::vector<char>& out,
              int64_t bytes) {
  int n = 1, rank = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &rank);
  const int part = static_cast<int>(bytes / n);
  if (op == "all_gather") {
    MPI_Allgather(in.data(), part, MPI_BYTE, out.data(), part, MPI_BYTE, comm);
  } else if (op == "reduce_scatter") {
    const int floats = part / 4;
    MPI_Reduce_scatter_block(in.data(), out.data(), floats, MPI_FLOAT, MPI_SUM, comm);
  } else if (op == "all_reduce") {
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(bytes / 4), MPI_FLOAT, MPI_SUM, comm);
  } else if (op == "all_to_all") {
    MPI_Alltoall(in.data(), part, MPI_BYTE, out.data(), part, MPI_BYTE, comm);
  } else {
    MPI_Sendrecv(in.data(), static_cast<int>(bytes), MPI_BYTE, (rank + 1) % n, 0, out.data(),
                 static_cast<int>(bytes), MPI_BYTE, (rank + n - 1) % n, 0, comm, MPI_STATUS_IGNORE);
  }
}

nlohmann::json probe_group(MPI_Comm comm, int ranks_per_node, const std::string& group,
                           const ProbeOptions& o) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  nlohmann::json tables = nlohmann::json::array();
  for (const std::string op : kProbeCollectives) {
    nlohmann::json rows = nlohmann::json::array();
    for (double size = o.min_bytes; size <= o.max_bytes; size *= 2) {
      const int64_t bytes = probe_message_bytes(size, n);
      std::vector<char> in(static_cast<std::size_t>(bytes), 1);
      std::vector<char> out(static_cast<std::size_t>(bytes), 0);
      for (int i = 0; i < o.warmup; ++i) run_once(op, comm, in, out, bytes);
      MPI_Barrier(comm);
      const double start = MPI_Wtime();
      for (int i = 0; i < o.iterations; ++i) run_once(op, comm, in, out, bytes);
      double seconds = (MPI_Wtime() - start) / o.iterations;
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
      rows.push_back({{"bytes", static_cast<double>(bytes)}, {"seconds", seconds}});
    }
    tables.push_back(probe_table(op, group, n, ranks_per_node, std::move(rows)));
  }
  return tables;
}

}  // namespace

int64_t probe_message_bytes(double size, int ranks) {
  const auto unit = static_cast<int64_t>(4) * ranks;
  return std::max<int64_t>(unit, static_cast<int64_t>(size) / unit * unit);
}

nlohmann::json probe_table(const std::string& op, const std::string& group, int ranks,
                           int ranks_per_node, nlohmann::json rows) {
  return {{"op", op},
          {"group", group},
          {"ranks", ranks},
          {"ranks_per_node", std::min(ranks, ranks_per_node)},
          {"rows", std::move(rows)}};
}

nlohmann::json run_cpu_probe(MPI_Comm world, const ProbeOptions& options) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &ranks);
  // Ranks that share memory are one node.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int per_node = 1;
  MPI_Comm_size(node, &per_node);
  int most = per_node;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, world);
  nlohmann::json collectives = nlohmann::json::array();
  if (ranks > 1) {
    for (auto& t : probe_group(world, most, "world", options)) collectives.push_back(t);
  }
  // Across hosts, the intra-node tier too: every node measures, rank 0's is kept.
  if (most < ranks && per_node > 1) {
    for (auto& t : probe_group(node, most, "node", options)) collectives.push_back(t);
  }
  MPI_Comm_free(&node);
  if (rank != 0) return {};
  return {{"probe_version", 1}, {"backend", "cpu"},       {"device", "CPU (MPI)"},
          {"ranks", ranks},     {"ranks_per_node", most}, {"collectives", collectives}};
}

}  // namespace shardplan
