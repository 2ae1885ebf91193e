#include "cli/mpi_sweep.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <thread>
#include <type_traits>

namespace shardplan {

BatchEvaluator mpi_batch_evaluator(int rank, int ranks) {
  return [rank, ranks](
             const std::vector<std::size_t>& batch,
             const std::function<std::vector<TimelineSummary>(const std::vector<std::size_t>&)>&
                 here) {
    // The summaries travel as bytes: plain numbers, the same layout on every rank.
    static_assert(std::is_trivially_copyable_v<TimelineSummary>);
    const auto k = static_cast<std::size_t>(ranks);
    std::vector<std::size_t> mine;
    for (auto i = static_cast<std::size_t>(rank); i < batch.size(); i += k)
      mine.push_back(batch[i]);
    std::vector<TimelineSummary> done;
    try {
      done = here(mine);
    } catch (const std::exception& e) {
      std::cerr << fmt::format("shardplan: error (rank {}): {}\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    constexpr int kBytes = sizeof(TimelineSummary);
    std::vector<int> counts(k), displacements(k);
    int offset = 0;
    for (std::size_t r = 0; r < k; ++r) {
      const std::size_t share = r < batch.size() ? (batch.size() - r + k - 1) / k : 0;
      counts[r] = static_cast<int>(share) * kBytes;
      displacements[r] = offset;
      offset += counts[r];
    }
    std::vector<TimelineSummary> gathered(batch.size());
    MPI_Allgatherv(done.data(), static_cast<int>(done.size()) * kBytes, MPI_BYTE, gathered.data(),
                   counts.data(), displacements.data(), MPI_BYTE, MPI_COMM_WORLD);
    std::vector<TimelineSummary> out(batch.size());
    std::size_t at = 0;
    for (std::size_t r = 0; r < k; ++r) {
      for (std::size_t i = r; i < batch.size(); i += k) out[i] = gathered[at++];
    }
    return out;
  };
}

int threads_per_rank() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(local, 1));
}

}  // namespace shardplan
