#pragma once

#include <mpi.h>

#include <cstdlib>

namespace shardplan {

// MPI for the length of one command.
struct MpiSession {
  MpiSession() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) MPI_Init(nullptr, nullptr);
  }
  ~MpiSession() {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// Whether mpirun (Open MPI), srun or another PMI launcher started this process.
inline bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

}  // namespace shardplan
