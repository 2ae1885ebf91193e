// The collective cost model against NCCL's tuning formulas worked out by hand here, and
// its physical properties.
#include "simulator/collective_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/cluster_spec.h"

namespace shardplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ClusterSpec h100(int64_t nodes) {
  return load_cluster("dgx-h100", nodes, std::nullopt);
}

TEST(CollectiveModel, AllGatherInOneNodeWorkedByHand) {
  // 8 ranks, 1 GiB gathered. Ring Simple: 8.4 µs base + 7 NVLink hops × 3.4 µs, at the
  // measured 360 GB/s bus bandwidth, moving 7/8 of the buffer per rank.
  const CollectiveEstimate e = estimate_collective(h100(1), Collective::all_gather, kGiB, {8, 8});
  const double expected = (8.4 + 7 * 3.4) * 1e-6 + kGiB * 7.0 / 8.0 / 360e9;
  EXPECT_NEAR(e.seconds, expected, 1e-12);
  EXPECT_EQ(e.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(e.protocol, NcclProtocol::simple);
  EXPECT_NEAR(e.busbw_bytes_per_s, kGiB / expected * 7.0 / 8.0, 1.0);
  EXPECT_NEAR(e.algbw_bytes_per_s * e.seconds, kGiB, 1e-3);
}

TEST(CollectiveModel, SmallMessagesAreLatencyBound) {
  // 1 KiB all-reduce on 8 ranks: LL ring, 6.6 µs + 14 hops × 0.6 µs, plus 1 KiB × 14/8 at
  // half of 360 GB/s — microseconds, not bytes ÷ bandwidth.
  const CollectiveEstimate e = estimate_collective(h100(1), Collective::all_reduce, 1024, {8, 8});
  EXPECT_NEAR(e.seconds, (6.6 + 14 * 0.6) * 1e-6 + 1024 * 14.0 / 8.0 / 180e9, 1e-12);
  EXPECT_EQ(e.protocol, NcclProtocol::ll);
  EXPECT_GT(e.seconds, 100 * 1024 * 14.0 / 8.0 / 360e9);
}

TEST(CollectiveModel, RingAcrossNodesRunsAtTheNodesNics) {
  // 16 ranks on 2 nodes: 14 NVLink hops and 1 network hop (Simple: 14 µs); one ring per
  // NIC, so the node's 8 NICs give min(360, 8 × 48) GB/s.
  const CollectiveEstimate e = estimate_collective(h100(2), Collective::all_gather, kGiB, {16, 8});
  EXPECT_NEAR(e.seconds, (8.4 + 14 * 3.4 + 1 * 14.0) * 1e-6 + kGiB * 15.0 / 16.0 / 360e9, 1e-12);
  EXPECT_NEAR(e.link_bus_bandwidth, 360e9, 1);
  // One rank per node (an HSDP outer group): its one NIC, 48 GB/s.
  const CollectiveEstimate outer =
      estimate_collective(h100(2), Collective::all_gather, kGiB, {2, 1});
  EXPECT_NEAR(outer.link_bus_bandwidth, 48e9, 1);
  // Two ranks per node: two NICs.
  EXPECT_NEAR(estimate_collective(h100(2), Collective::all_gather, kGiB, {4, 2}).link_bus_bandwidth,
              96e9, 1);
}

TEST(CollectiveModel, SendRecvRingShiftWorkedByHand) {
  // Context parallelism's K/V ring inside a node: every rank sends 64 MiB to the next, one
  // Simple hop (8.4 + 3.4 µs) and the bytes at the NVLink ring rate; busbw = algbw
  // (nccl-tests sendrecv).
  const double bytes = 64.0 * 1024 * 1024;
  const CollectiveEstimate e = estimate_collective(h100(1), Collective::send_recv, bytes, {4, 4});
  EXPECT_NEAR(e.seconds, (8.4 + 3.4) * 1e-6 + bytes / 360e9, 1e-12);
  EXPECT_DOUBLE_EQ(e.busbw_bytes_per_s, e.algbw_bytes_per_s);
  // A ring that crosses nodes (one rank per node) is held to one NIC and a network hop.
  const CollectiveEstimate across =
      estimate_collective(h100(2), Collective::send_recv, bytes, {2, 1});
  EXPECT_NEAR(across.seconds, (8.4 + 14.0) * 1e-6 + bytes / 48e9, 1e-12);
}

TEST(CollectiveModel, AllToAllAcrossNodesRunsAtOneNicTimesNOverNMinusOne) {
  // 1 GiB per rank, (n − 1)/n of it leaves the rank. In one node: NVLink.
  const CollectiveEstimate one = estimate_collective(h100(1), Collective::all_to_all, kGiB, {8, 8});
  EXPECT_NEAR(one.seconds, (8.4 + 3.4) * 1e-6 + kGiB * 7.0 / 8.0 / 360e9, 1e-12);
  // 2 nodes: half the traffic crosses, so the bus rate is 2 × one NIC (nccl-tests #130).
  const CollectiveEstimate two =
      estimate_collective(h100(2), Collective::all_to_all, kGiB, {16, 8});
  EXPECT_NEAR(two.link_bus_bandwidth, 2 * 48e9, 1);
  // 4 nodes: 4/3 × one NIC.
  const CollectiveEstimate four =
      estimate_collective(h100(4), Collective::all_to_all, kGiB, {32, 8});
  EXPECT_NEAR(four.link_bus_bandwidth, 48e9 * 4.0 / 3.0, 1);
  EXPECT_NEAR(four.busbw_bytes_per_s, four.algbw_bytes_per_s * 31.0 / 32.0, 1);
}

TEST(CollectiveModel, TreeWinsSmallAllReducesAcrossNodes) {
  // LL tree: 6.8 + 2 × (7 × 0.6 + log2(2) × 5.0) = 25.2 µs against the LL ring's
  // 6.6 + 28 × 0.6 + 2 × 2.7 = 28.8 µs.
  const CollectiveEstimate e = estimate_collective(h100(2), Collective::all_reduce, 1024, {16, 8});
  EXPECT_EQ(e.algorithm, NcclAlgorithm::tree);
  EXPECT_NEAR(e.latency_seconds, 25.2e-6, 1e-12);
}

TEST(CollectiveModel, NvlsForLargeAllReducesInANode) {
  const CollectiveEstimate e =
      estimate_collective(h100(1), Collective::all_reduce, 8 * kGiB, {8, 8});
  EXPECT_EQ(e.algorithm, NcclAlgorithm::nvls);
  EXPECT_NEAR(e.busbw_bytes_per_s / 480e9, 1.0, 0.01);  // nccl-tests #212 on 8 × H100
  const ClusterSpec a100 = load_cluster("dgx-a100", 1, std::nullopt);
  EXPECT_EQ(estimate_collective(a100, Collective::all_reduce, 8 * kGiB, {8, 8}).algorithm,
            NcclAlgorithm::ring);
}

TEST(CollectiveModel, BusBandwidthApproachesTheMeasuredOneAndRisesWithSize) {
  for (const char* name : {"dgx-h100", "dgx-a100", "gb200-nvl72"}) {
    const ClusterSpec c = load_cluster(name, 1, std::nullopt);
    const RankLayout layout{c.gpus_per_node, c.gpus_per_node};
    double previous_time = 0;
    double previous_busbw = 0;
    for (double bytes = 1024; bytes <= 8 * kGiB; bytes *= 2) {
      const CollectiveEstimate e =
          estimate_collective(c, Collective::reduce_scatter, bytes, layout);
      EXPECT_GT(e.seconds, previous_time) << name << " " << bytes;
      EXPECT_GE(e.busbw_bytes_per_s, previous_busbw * 0.999) << name << " " << bytes;
      previous_time = e.seconds;
      previous_busbw = e.busbw_bytes_per_s;
    }
    // At 8 GiB the latency (71 hops on the 72-GPU NVL72 ring) is still a few per cent.
    EXPECT_NEAR(previous_busbw / c.intra_node.measured_bus_bandwidth_bytes_per_s, 1.0, 0.03)
        << name;
  }
}

TEST(CollectiveModel, FasterLinksNeverSlower) {
  ClusterSpec slow = h100(2);
  ClusterSpec fast = slow;
  fast.inter_node.measured_bus_bandwidth_bytes_per_s *= 2;
  fast.intra_node.measured_bus_bandwidth_bytes_per_s *= 1.5;
  for (Collective op :
       {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
    for (double bytes = 1024; bytes <= kGiB; bytes *= 8) {
      EXPECT_LE(estimate_collective(fast, op, bytes, {16, 8}).seconds,
                estimate_collective(slow, op, bytes, {16, 8}).seconds);
    }
  }
}

TEST(CollectiveModel, OneRankCostsNothing) {
  EXPECT_EQ(estimate_collective(h100(1), Collective::all_reduce, kGiB, {1, 8}).seconds, 0);
}

// Published nccl-tests tables on one 8 × H100 node (tests/data/nccl_tests_8xh100.json:
// together-nccl-tests, NCCL 2.26.2), none used to set a constant. From 8 MiB up the ring
// all-gather and reduce-scatter are within 10 % at every size and the NVLS all-reduce from
// 256 MiB up; below, the measured times sit on a 35–42 µs floor (one process drives the 8
// GPUs, -g 8) that the model's NCCL latencies (11–32 µs) do not reach: docs/model.md
// "Collectives" keeps that comparison.
TEST(CollectivePublished, EightH100LargeMessagesWithinTenPercent) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl_tests_8xh100.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in);
  const ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  const RankLayout layout{.ranks = 8, .ranks_per_node = 8};
  int64_t checked = 0;
  for (const auto& [name, rows] : data.at("tables").items()) {
    const Collective op = *parse_collective(name);
    const double from = op == Collective::all_reduce ? 256.0 * (1 << 20) : 8.0 * (1 << 20);
    for (const auto& row : rows) {
      const double bytes = row.at(0).get<double>();
      if (bytes < from) continue;
      const double measured = row.at(1).get<double>() * 1e-6;
      const CollectiveEstimate e = estimate_collective(cluster, op, bytes, layout);
      EXPECT_NEAR(e.seconds / measured, 1.0, 0.10) << name << " " << bytes;
      if (op == Collective::all_reduce) {
        EXPECT_EQ(e.algorithm, NcclAlgorithm::nvls) << bytes;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 11 + 6);
}

// The same fabric launched as training launches it, one process per GPU (8 × H20 on NVLink4
// and NVSwitch, NCCL 2.30.4, ring all-reduce; tests/data/nccl_tests_8xh100.json
// "one_rank_per_gpu"): from 32 KiB to 1 GiB every size within 20 % of the model with NVLS
// off (worst −18 % at 32 KiB, where the measured floor is 18.7 µs against NCCL's 15).
TEST(CollectivePublished, OneRankPerGpuRingAllReduceWithinTwentyPercent) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl_tests_8xh100.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in).at("one_rank_per_gpu");
  ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  cluster.nccl.nvls = false;
  const RankLayout layout{.ranks = 8, .ranks_per_node = 8};
  int64_t checked = 0;
  for (const auto& row : data.at("tables").at("all_reduce")) {
    const double bytes = row.at(0).get<double>();
    const double measured = row.at(1).get<double>() * 1e-6;
    const CollectiveEstimate e =
        estimate_collective(cluster, Collective::all_reduce, bytes, layout);
    EXPECT_NEAR(e.seconds / measured, 1.0, 0.20) << bytes;
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

// RCCL on 8 × MI300X (AMD's rccl-tests all-reduce table, tests/data/rccl_tests_8xmi300x.json)
// with RCCL's gfx942 tuning constants (models/clusters/mi300x.json): from 16 MiB up every
// size within 10 % (ring Simple at the XGMI mesh's 315 GB/s). Below, RCCL runs faster than
// its own ring table says (13 µs at 1 KiB against LL's 12 + 14 × 0.8 = 23.2 µs: RCCL's
// small-message paths); the model stays above the measurement there, by less than 1.8×.
TEST(CollectivePublished, EightMi300xAllReduceWithRcclConstants) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/rccl_tests_8xmi300x.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json rows = nlohmann::json::parse(in).at("tables").at("all_reduce");
  const ClusterSpec cluster = load_cluster("mi300x", 1, std::nullopt);
  ASSERT_EQ(cluster.nccl.library, CollectiveLibrary::rccl);
  const RankLayout layout{.ranks = 8, .ranks_per_node = 8};
  for (const auto& row : rows) {
    const double bytes = row.at(0).get<double>();
    const double measured = row.at(1).get<double>() * 1e-6;
    const CollectiveEstimate e =
        estimate_collective(cluster, Collective::all_reduce, bytes, layout);
    EXPECT_NE(e.protocol, NcclProtocol::ll128) << "LL128 is off on gfx942";
    EXPECT_NE(e.algorithm, NcclAlgorithm::nvls);
    if (bytes >= 16.0 * (1 << 20)) {
      EXPECT_NEAR(e.seconds / measured, 1.0, 0.10) << bytes;
    } else {
      EXPECT_GT(e.seconds, measured) << bytes;
      EXPECT_LT(e.seconds, 1.8 * measured) << bytes;
    }
  }
  // RCCL's constants, not NCCL's: 1 KiB is ring LL at 12 + 14 × 0.8 µs.
  EXPECT_NEAR(estimate_collective(cluster, Collective::all_reduce, 1024, layout).latency_seconds,
              23.2e-6, 1e-9);
}

}  // namespace
}  // namespace shardplan
