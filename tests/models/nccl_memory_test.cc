// NCCL's device memory per communicator, worked by hand from NCCL's allocation rules
// (docs/model.md "Device memory"; docs/research/nccl_memory.md) and held against the one
// published measurement of a communicator's growth (NVIDIA/nccl #1685).
#include "models/nccl_memory.h"

#include <gtest/gtest.h>

namespace shardplan {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

NcclSpec h100() {
  NcclSpec n;  // the defaults: 24 channels, 16 across nodes, 32 per peer, 16 NVLS channels
  n.nvls = true;
  return n;
}

CommunicatorUse ring(int64_t ranks, int64_t per_node) {
  return {.layout = {ranks, per_node}, .ring = true};
}

TEST(NcclMemory, OneNodeRingIsItsChannelsConnectionsAndMetadata) {
  // 32 initialised channels (pow2Up(24)) × 6 MiB + 16 NVLS channels × 2 MiB + 2 MiB of
  // credits + 4 MiB per communicator = 230 MiB; 24 ring channels × (10 + 2) MiB = 288 MiB.
  const CommunicatorBytes b = nccl_communicator_bytes(h100(), ring(8, 8));
  EXPECT_EQ(b.metadata, 230 * kMiB);
  EXPECT_EQ(b.ring, 288 * kMiB);
  EXPECT_EQ(b.tree + b.nvls + b.p2p, 0);
  EXPECT_EQ(b.total(), 518 * kMiB);
}

TEST(NcclMemory, WithoutNvlsTheMetadataHasNoNvlsChannels) {
  NcclSpec a100 = h100();
  a100.nvls = false;
  EXPECT_EQ(nccl_communicator_bytes(a100, ring(8, 8)).total(), (196 + 288) * kMiB);
}

TEST(NcclMemory, LargeAllReducesAddNvlsBuffersOnANodeThatHasIt) {
  // 16 NVLS channels × 2 slots × 1 MiB × 8 heads = 256 MiB.
  CommunicatorUse use = ring(8, 8);
  use.bulk_all_reduce = true;
  const CommunicatorBytes b = nccl_communicator_bytes(h100(), use);
  EXPECT_EQ(b.nvls, 256 * kMiB);
  EXPECT_EQ(b.total(), 774 * kMiB);
}

TEST(NcclMemory, TwoNodesRingLeavesEachNodeOnSomeChannels) {
  // 16 channels across nodes: metadata 16 × 6 + 16 × 2 + 2 + 4 = 134 MiB; ring 16 × 12 MiB
  // plus, on the 16 / 8 = 2 channels where this rank leaves the node, 8 MiB more (a
  // network send, 10 MiB, instead of an NVLink one, 2 MiB).
  const CommunicatorBytes b = nccl_communicator_bytes(h100(), ring(16, 8));
  EXPECT_EQ(b.metadata, 134 * kMiB);
  EXPECT_EQ(b.ring, (192 + 16) * kMiB);
  EXPECT_EQ(b.total(), 342 * kMiB);
}

TEST(NcclMemory, OneRankPerNodeConnectsOnlyOverTheNetwork) {
  // 4 nodes, one rank each: no NVLS; ring 16 channels × (10 + 10) MiB; small all-reduces
  // add the tree: 16 channels × 3 tree peers × 20 MiB.
  CommunicatorUse use = ring(4, 1);
  use.small_all_reduce = true;
  const CommunicatorBytes b = nccl_communicator_bytes(h100(), use);
  EXPECT_EQ(b.metadata, (96 + 4) * kMiB);
  EXPECT_EQ(b.ring, 320 * kMiB);
  EXPECT_EQ(b.tree, 16 * 3 * 20 * kMiB);
}

TEST(NcclMemory, AllToAllOnOneNodeMatchesTheMeasuredGrowth) {
  // NVIDIA/nccl #1685: on 8 × H100 an all_to_all_single took the memory outside PyTorch
  // from 1.06 GB to 4.34 GB (3.28 GB). NCCL connects 7 peers × 32 channels × 12 MiB =
  // 2688 MiB; the communicator's metadata (230 MiB) if the all-to-all created it.
  const CommunicatorUse use = all_to_all_peers({.layout = {8, 8}});
  EXPECT_EQ(use.p2p_intra_peers, 7);
  EXPECT_EQ(use.p2p_inter_peers, 0);
  const CommunicatorBytes b = nccl_communicator_bytes(h100(), use);
  EXPECT_EQ(b.p2p, 2688 * kMiB);
  const double measured = 4.34e9 - 1.06e9;
  EXPECT_GT(static_cast<double>(b.total()) / measured, 0.85);
  EXPECT_LT(static_cast<double>(b.total()) / measured, 1.0);
}

TEST(NcclMemory, AcrossNodesSendRecvSharesOnePoolPerDirection) {
  // 16 ranks, 8 per node: 7 NVLink peers (16 channels per peer across nodes: 16 × ⌈15/8⌉
  // = 32 > 16 halves it to 8) and 8 network peers sharing 2 × 16 channels × 16 × 128 KiB.
  const CommunicatorUse use = all_to_all_peers({.layout = {16, 8}});
  EXPECT_EQ(use.p2p_intra_peers, 7);
  EXPECT_EQ(use.p2p_inter_peers, 8);
  EXPECT_EQ(nccl_communicator_bytes(h100(), use).p2p, 7 * 8 * 12 * kMiB + 64 * kMiB);
}

TEST(NcclMemory, RingShiftPeersAtTheWorstRank) {
  const CommunicatorUse two = ring_shift_peers({.layout = {2, 8}});
  EXPECT_EQ(two.p2p_intra_peers + two.p2p_inter_peers, 1);
  const CommunicatorUse node = ring_shift_peers({.layout = {8, 8}});
  EXPECT_EQ(node.p2p_intra_peers, 2);
  EXPECT_EQ(node.p2p_inter_peers, 0);
  const CommunicatorUse edge = ring_shift_peers({.layout = {16, 8}});
  EXPECT_EQ(edge.p2p_intra_peers, 1);
  EXPECT_EQ(edge.p2p_inter_peers, 1);
  const CommunicatorUse spread = ring_shift_peers({.layout = {4, 1}});
  EXPECT_EQ(spread.p2p_intra_peers, 0);
  EXPECT_EQ(spread.p2p_inter_peers, 2);
}

TEST(NcclMemory, ASingleRankConnectsNothing) {
  EXPECT_EQ(nccl_communicator_bytes(h100(), ring(1, 8)).total(), 0);
}

TEST(NcclMemory, MoreChannelsMoreMemory) {
  NcclSpec b200 = h100();
  b200.channels = 32;
  b200.nvls_channels = 24;
  // 32 channels × 6 + 24 × 2 + 2 + 4 = 246 MiB; ring 32 × 12 = 384 MiB.
  EXPECT_EQ(nccl_communicator_bytes(b200, ring(8, 8)).total(), (246 + 384) * kMiB);
}

TEST(NcclMemory, BeforeRuntimeConnectEveryCommunicatorConnectsEverythingAtInit) {
  // NCCL 2.20 on 8 × H100, a communicator that only gathers: the ring 288 MiB, the tree's
  // chain 288 MiB, NVLS 16 channels × 2 × (4 + 2) MiB × 8 heads = 1536 MiB, and the network
  // pool 32 channels × 16 × 512 KiB = 256 MiB, beside the 230 MiB of metadata.
  NcclSpec old = h100();
  old.version_code = 22005;
  const CommunicatorBytes b = nccl_communicator_bytes(old, ring(8, 8));
  EXPECT_EQ(b.ring, 288 * kMiB);
  EXPECT_EQ(b.tree, 288 * kMiB);
  EXPECT_EQ(b.nvls, 1536 * kMiB);
  EXPECT_EQ(b.p2p, 256 * kMiB);
  EXPECT_EQ(b.total(), 2598 * kMiB);
  // 2.21 shrank NVLS's slots to 1 + 2 MiB: 768 MiB.
  old.version_code = 22105;
  EXPECT_EQ(nccl_communicator_bytes(old, ring(8, 8)).nvls, 768 * kMiB);
  // Two ranks: the tree's one peer is the ring's (no chain), NVLS over 2 heads.
  old.version_code = 21903;
  const CommunicatorBytes pair = nccl_communicator_bytes(old, ring(2, 8));
  EXPECT_EQ(pair.tree, 0);
  EXPECT_EQ(pair.nvls, 384 * kMiB);
  EXPECT_EQ(pair.total(), (230 + 288 + 384 + 256) * kMiB);
}

}  // namespace
}  // namespace shardplan
