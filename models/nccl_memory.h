#pragma once

// The device memory one rank's NCCL communicator holds, from NCCL's own allocation rules
// (NCCL 2.22 – 2.30 with cuMem, its default): what nvidia-smi counts beyond PyTorch's
// allocator. Every constant and rule: docs/model.md "Device memory", after
// docs/research/nccl_memory.md.
#include <cstdint>

#include "models/cluster_spec.h"

namespace shardplan {

// What a communicator runs, which decides the buffers NCCL connects: NCCL ≥ 2.22 connects
// an algorithm's buffers the first time it runs one (NCCL_RUNTIME_CONNECT), so a group that
// only gathers and scatters holds ring buffers alone.
struct CommunicatorUse {
  RankLayout layout;
  bool ring = false;              // all-gathers, reduce-scatters (ring)
  bool small_all_reduce = false;  // scalars, losses, barriers: ring, and tree across nodes
  bool bulk_all_reduce = false;   // gradients, activations: also NVLS where the node has it
  int64_t p2p_intra_peers = 0;    // send/recv peers in this rank's NVLink domain
  int64_t p2p_inter_peers = 0;    // ... across domains
};

// The worst rank's send/recv peers for a ring shift (context parallelism's K/V ring) and
// for an all-to-all over the group.
CommunicatorUse ring_shift_peers(CommunicatorUse use);
CommunicatorUse all_to_all_peers(CommunicatorUse use);

// Bytes on one GPU, by what NCCL allocates them for.
struct CommunicatorBytes {
  int64_t metadata = 0;  // per-channel device arrays and NVLS credits, at init
  int64_t ring = 0;
  int64_t tree = 0;
  int64_t nvls = 0;
  int64_t p2p = 0;
  int64_t total() const { return metadata + ring + tree + nvls + p2p; }
};

// One rank's bytes for a communicator of `use` on a cluster with `nccl`'s channels; zero
// for a single rank, which NCCL never connects.
CommunicatorBytes nccl_communicator_bytes(const NcclSpec& nccl, const CommunicatorUse& use);

}  // namespace shardplan
