#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdlib>

namespace shardplan {

// MPI for the length of one command. It finalizes only what it initialised: in the Python
// module MPI may belong to the caller (mpi4py), and after a command finalized it, MPI
// cannot start again in that process (mpi_finalized()).
struct MpiSession {
  MpiSession() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      MPI_Init(nullptr, nullptr);
      owns_ = true;
    }
  }
  ~MpiSession() {
    int done = 0;
    MPI_Finalized(&done);
    if (owns_ && !done) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_ = false;
};

inline bool mpi_finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

// Whether mpirun (Open MPI), srun or another PMI launcher started this process.
inline bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

// This process's rank as the launcher set it (0 without a launcher), readable before MPI
// starts, so an error found before the ranks talk is printed once, by rank 0.
inline int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// The number of ranks as the launcher set it (1 without a launcher), readable before MPI
// starts.
inline int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name)) return std::max(std::atoi(value), 1);
  }
  return 1;
}

}  // namespace shardplan
