#include "models/nccl_memory.h"

#include <algorithm>

#include "models/integer_math.h"

namespace shardplan {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// With cuMem every NCCL allocation is a whole number of 2 MiB granules
// (src/include/alloc.h ncclCuMemAlloc rounds to the allocation granularity).
constexpr int64_t kGranule = 2 * kMiB;
// One intra-node (P2P transport) connection: the receiver's FIFO holds all three
// protocols' buffers, LL 512 KiB + LL128 4.6875 MiB + Simple 4 MiB = 9.1875 MiB, rounded to
// 10 MiB; the sender's head is one more granule (src/init.cc, transport/p2p.cc; NVIDIA/nccl
// #1685 logs exactly these two sizes, 10485760 and 2097152 B).
constexpr int64_t kConnection = 10 * kMiB + kGranule;
// A network connection: 10 MiB on the sending GPU and 10 MiB on the receiving one
// (transport/net.cc with GPUDirect RDMA); a rank that both sends and receives over the
// network on a channel holds 20 MiB.
constexpr int64_t kNetConnection = 10 * kMiB;
// Per initialised channel three device arrays of one granule each (channel.cc initChannel);
// per communicator two more (init.cc devCommAndChans, rankToLocalRank); per NVLS channel
// one, and one for NVLS credits (channel.cc initNvlsChannel, nvls.cc).
constexpr int64_t kChannelMetadata = 3 * kGranule;
constexpr int64_t kCommunicatorMetadata = 2 * kGranule;
constexpr int64_t kNvlsChannelMetadata = kGranule;
// NVLS buffers: NCCL_NVLS_CHUNKSIZE 128 KiB × NCCL_STEPS 8 per slot, two slots per channel
// and head (nvls.cc ncclNvlsBufferSetup).
constexpr int64_t kNvlsSlot = 128 * 1024 * 8;
// Send/recv across nodes share one pool per direction: 16 chunks of NCCL_P2P_NET_CHUNKSIZE
// (128 KiB) per p2p channel (transport/net.cc shared buffers).
constexpr int64_t kNetP2pPoolPerChannel = 16 * 128 * 1024;
// Before 2.22 that pool is allocated at init, at NCCL_P2P_NVL_CHUNKSIZE (512 KiB) on a
// communicator inside one node (NVIDIA/nccl PR #2366: +512 MiB with
// NCCL_RUNTIME_CONNECT=0; 64 channels × 16 × 512 KiB).
constexpr int64_t kEagerPoolChunkIntraNode = 512 * 1024;
// NCCL_RUNTIME_CONNECT (2.22): buffers connected per algorithm on first use.
constexpr int64_t kRuntimeConnectVersion = 22200;
// NVLS buffers per channel and head before 2.22: 2.17 – 2.20 two slots of the Simple
// buffer (4 MiB) plus 2 MiB (nvls.cc at 5d3ab08b: nvlsPerRankSize = nChannels · 2 ·
// (buffSize + memSize)), 2.21 two slots of 1 + 2 MiB (ab2b89c4).
constexpr int64_t kNvls221Version = 22100;
constexpr int64_t kOldNvlsSlot = 4 * kMiB + kGranule;
constexpr int64_t kNvls221Slot = kMiB + kGranule;

int64_t ceil_div(int64_t a, int64_t b) {
  return round_up(a, b) / b;
}

int64_t pow2_up(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

CommunicatorUse ring_shift_peers(CommunicatorUse use) {
  const RankLayout& l = use.layout;
  const int64_t peers = std::min<int64_t>(2, l.ranks - 1);  // the next rank and the previous
  // The worst rank sits at a node's edge: one neighbour across, unless the node holds it alone.
  const int64_t inter = l.nodes() == 1 ? 0 : l.ranks_per_node == 1 ? peers : 1;
  use.p2p_intra_peers = std::max<int64_t>(peers - inter, 0);
  use.p2p_inter_peers = inter;
  return use;
}

CommunicatorUse all_to_all_peers(CommunicatorUse use) {
  const RankLayout& l = use.layout;
  const int64_t local = std::min(l.ranks, l.ranks_per_node);
  use.p2p_intra_peers = local - 1;
  use.p2p_inter_peers = l.ranks - local;
  return use;
}

CommunicatorBytes nccl_communicator_bytes(const NcclSpec& nccl, const CommunicatorUse& use) {
  CommunicatorBytes b;
  const RankLayout& l = use.layout;
  if (l.ranks <= 1) return b;
  const int64_t per_node = std::clamp<int64_t>(l.ranks_per_node, 1, l.ranks);
  const int64_t nodes = ceil_div(l.ranks, per_node);
  const bool multi_node = nodes > 1;
  const int64_t channels = multi_node ? nccl.channels_multi_node : nccl.channels;
  // p2pnChannels = pow2Up(nChannels) (graph/paths.cc); every channel up to the larger count
  // is initialised at init.
  const int64_t p2p_channels = std::min<int64_t>(pow2_up(channels), 64);
  // NVLS needs an NVSwitch that has it and two of the group's GPUs on it (nvls.cc).
  const bool nvls = nccl.nvls && per_node >= 2;
  // Channels on which this rank's ring or tree link leaves its node.
  const int64_t exit_channels = ceil_div(channels, per_node);
  // Tree peers across nodes: the parent and up to two children of the double binary tree.
  const int64_t tree_peers = std::min<int64_t>(3, nodes - 1);

  b.metadata = kChannelMetadata * std::max(channels, p2p_channels) + kCommunicatorMetadata +
               (nvls ? kNvlsChannelMetadata * nccl.nvls_channels + kGranule : 0);
  // Before 2.22 NCCL connects the ring, the tree and NVLS at init, whatever runs.
  const bool eager = nccl.version_code < kRuntimeConnectVersion;
  if (eager || use.ring || use.small_all_reduce || use.bulk_all_reduce) {
    if (!multi_node) {
      b.ring = channels * kConnection;
    } else if (per_node == 1) {
      b.ring = channels * 2 * kNetConnection;
    } else {
      // The exit channels send over the network (10 MiB) instead of NVLink (2 MiB).
      b.ring = channels * kConnection + exit_channels * (kNetConnection - kGranule);
    }
  }
  if (eager && !multi_node) {
    // The chain inside the node; with two ranks it is the ring's one peer (NVIDIA/nccl
    // #964: 544 MB for a 2-GPU group, 688 MB for larger ones, 12 channels × 12 MiB apart).
    if (l.ranks > 2) b.tree = channels * kConnection;
  } else if ((eager || use.small_all_reduce || use.bulk_all_reduce) && multi_node) {
    // Inside a node the tree is a chain; the node's head ranks connect to their tree peers.
    b.tree = (per_node > 1 ? channels * kConnection : 0) +
             exit_channels * tree_peers * 2 * kNetConnection;
  }
  if (nvls && eager) {
    const int64_t slot = nccl.version_code < kNvls221Version ? kOldNvlsSlot : kNvls221Slot;
    b.nvls = nccl.nvls_channels * 2 * slot * per_node;
    if (multi_node) b.nvls += nccl.nvls_channels * tree_peers * 2 * kNetConnection;
  } else if (use.bulk_all_reduce && nvls) {
    b.nvls = round_up(nccl.nvls_channels * 2 * kNvlsSlot * per_node, kGranule);
    // NVLS_TREE: every head connects to its tree peers on every NVLS channel.
    if (multi_node) b.nvls += nccl.nvls_channels * tree_peers * 2 * kNetConnection;
  }
  if (use.p2p_intra_peers > 0 || use.p2p_inter_peers > 0) {
    int64_t per_peer = std::min(nccl.p2p_channels_per_peer, p2p_channels);
    // Across nodes the per-peer channels halve until a batch of eight peers fits the
    // p2p channels (graph/paths.cc).
    const int64_t peers = use.p2p_intra_peers + use.p2p_inter_peers;
    while (multi_node && per_peer > 1 && per_peer * ceil_div(peers, 8) > p2p_channels)
      per_peer /= 2;
    b.p2p = use.p2p_intra_peers * per_peer * kConnection +
            (use.p2p_inter_peers > 0 ? 2 * p2p_channels * kNetP2pPoolPerChannel : 0);
  }
  // Before 2.22 the network pool is allocated at init (in place of the lazy one).
  if (eager) {
    if (use.p2p_inter_peers > 0) b.p2p -= 2 * p2p_channels * kNetP2pPoolPerChannel;
    b.p2p += p2p_channels * 16 * (multi_node ? 128 * 1024 : kEagerPoolChunkIntraNode);
  }
  return b;
}

}  // namespace shardplan
