#include "simulator/collective_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "models/name_table.h"

namespace shardplan {
namespace {

// NCCL src/graph/tuning.cc (v2.23–2.30; ../shared/REFERENCES.md), indexed by protocol
// LL, LL128, Simple, in microseconds. The cluster files carry the LL entries of the
// ring rows (nccl.base_latency_s, intra_node.latency_s, inter_node.latency_s).
constexpr std::array<double, 3> kRingBaseUs = {6.6, 14.0, 8.4};
constexpr std::array<double, 3> kTreeBaseUs = {6.8, 14.0, 8.4};
constexpr std::array<double, 3> kRingNvlinkHopUs = {0.6, 1.9, 3.4};
constexpr std::array<double, 3> kTreeNvlinkHopUs = {0.6, 1.25, 4.0};
constexpr std::array<double, 3> kRingNetHopUs = {2.7, 4.0, 14.0};
constexpr std::array<double, 3> kTreeNetHopUs = {5.0, 8.5, 14.0};
constexpr double kNvlsHopUs = 25.0;  // NVLS, Simple protocol only

// Share of the bus bandwidth each protocol delivers: LL sends 4 bytes of data per
// 8-byte line (flag + data), so half; LL128 120 of 128 bytes, capped by NCCL at 0.92 of
// the ring bandwidth (tuning.cc); Simple all of it.
constexpr std::array<double, 3> kProtocolBandwidth = {0.5, 0.92, 1.0};

// NVLS all-reduce over NVSwitch peaks near 480 GB/s busbw on 8 × H100 where rings reach
// 360 (nccl-tests #212, nccl #1281): 4/3 of the ring's measured bus bandwidth.
constexpr double kNvlsOverRing = 480.0 / 360.0;

constexpr std::array<NcclProtocol, 3> kProtocols = {NcclProtocol::ll, NcclProtocol::ll128,
                                                    NcclProtocol::simple};

double bus_factor(Collective op, int64_t n) {
  const double ranks = static_cast<double>(n);
  if (op == Collective::send_recv) return 1.0;
  return op == Collective::all_reduce ? 2.0 * (ranks - 1.0) / ranks : (ranks - 1.0) / ranks;
}

constexpr NameTable<Collective, 5> kCollectiveNames = {
    {{Collective::all_gather, "all_gather"},
     {Collective::reduce_scatter, "reduce_scatter"},
     {Collective::all_reduce, "all_reduce"},
     {Collective::send_recv, "send_recv"},
     {Collective::all_to_all, "all_to_all"}}};
}  // namespace

std::string_view collective_name(Collective c) {
  return name_of(kCollectiveNames, c);
}
std::optional<Collective> parse_collective(std::string_view text) {
  return value_of(kCollectiveNames, text);
}
std::vector<std::string> collective_names() {
  return names_of(kCollectiveNames);
}
CollectiveCandidates collective_candidates(const ClusterSpec& cluster, Collective op, double bytes,
                                           const RankLayout& layout) {
  CollectiveCandidates out;
  const int64_t n = layout.ranks;
  if (n <= 1 || bytes <= 0) return out;
  const int64_t nodes = layout.nodes();
  const int64_t per_node = std::min(n, layout.ranks_per_node);
  const NetworkTier tier = nodes > 1 ? NetworkTier::inter_node : NetworkTier::intra_node;
  // A ring that crosses nodes runs at the slower tier. Across nodes NCCL runs one ring per
  // NIC, so a node's share of the bus bandwidth is the NICs of the group's ranks there
  // (one per GPU): nccl-tests #119, 8 × A100 with 4 × HDR 200 Gb/s per node, expects
  // "200G x 4 / 8" = 100 GB/s busbw and measures 85–96; nccl-tests #309, 4 nodes of 8
  // H100–NIC pairs, 366 GB/s. A group with one rank per node is bound by its one NIC.
  const double ring_busbw =
      nodes > 1 ? std::min(cluster.intra_node.measured_bus_bandwidth_bytes_per_s,
                           static_cast<double>(per_node) *
                               cluster.inter_node.measured_bus_bandwidth_bytes_per_s)
                : cluster.intra_node.measured_bus_bandwidth_bytes_per_s;
  const double bus_bytes = bytes * bus_factor(op, n);
  auto add = [&](NcclAlgorithm algorithm, NcclProtocol protocol, double latency_us, double busbw) {
    out.items[out.size++] = {.algorithm = algorithm,
                             .protocol = protocol,
                             .tier = tier,
                             .latency_seconds = latency_us * 1e-6,
                             .bus_bandwidth = busbw,
                             .bus_bytes = bus_bytes};
  };
  if (op == Collective::send_recv || op == Collective::all_to_all) {
    const auto simple = static_cast<std::size_t>(NcclProtocol::simple);
    const double hop = nodes > 1 ? kRingNetHopUs[simple] : kRingNvlinkHopUs[simple];
    double busbw = ring_busbw;
    if (op == Collective::all_to_all && nodes > 1) {
      const double n_nodes = static_cast<double>(nodes);
      busbw = std::min(
          cluster.intra_node.measured_bus_bandwidth_bytes_per_s,
          cluster.inter_node.measured_bus_bandwidth_bytes_per_s * n_nodes / (n_nodes - 1.0));
    }
    add(NcclAlgorithm::p2p, NcclProtocol::simple, kRingBaseUs[simple] + hop, busbw);
    return out;
  }
  const double steps =
      op == Collective::all_reduce ? 2.0 * static_cast<double>(n - 1) : static_cast<double>(n - 1);
  const double net_steps =
      (op == Collective::all_reduce ? 2.0 : 1.0) * static_cast<double>(nodes - 1);
  for (NcclProtocol p : kProtocols) {
    const auto i = static_cast<std::size_t>(p);
    const double ring_latency =
        kRingBaseUs[i] + (steps - net_steps) * kRingNvlinkHopUs[i] + net_steps * kRingNetHopUs[i];
    add(NcclAlgorithm::ring, p, ring_latency, ring_busbw * kProtocolBandwidth[i]);
    if (op == Collective::all_reduce && nodes > 1) {
      const double tree_latency =
          kTreeBaseUs[i] + 2.0 * (static_cast<double>(per_node - 1) * kTreeNvlinkHopUs[i] +
                                  std::log2(static_cast<double>(nodes)) * kTreeNetHopUs[i]);
      add(NcclAlgorithm::tree, p, tree_latency, ring_busbw * kProtocolBandwidth[i]);
    }
  }
  if (op == Collective::all_reduce && nodes == 1 && cluster.nccl.nvls) {
    const auto simple = static_cast<std::size_t>(NcclProtocol::simple);
    add(NcclAlgorithm::nvls, NcclProtocol::simple, kRingBaseUs[simple] + kNvlsHopUs,
        cluster.intra_node.measured_bus_bandwidth_bytes_per_s * kNvlsOverRing);
  }
  return out;
}

const CollectiveCalibration* calibration_of(const ClusterSpec& cluster,
                                            const CollectiveCandidate& c) {
  for (const CollectiveCalibration& k : cluster.collective_calibration) {
    if (k.tier == c.tier && k.algorithm == c.algorithm && k.protocol == c.protocol) return &k;
  }
  return nullptr;
}

CollectiveEstimate estimate_collective(const ClusterSpec& cluster, Collective op, double bytes,
                                       const RankLayout& layout) {
  CollectiveEstimate best;
  const CollectiveCandidates candidates = collective_candidates(cluster, op, bytes, layout);
  if (candidates.size == 0) return best;
  best.seconds = INFINITY;
  for (const CollectiveCandidate& c : candidates) {
    double latency = c.latency_seconds;
    double busbw = c.bus_bandwidth;
    if (const CollectiveCalibration* k = calibration_of(cluster, c)) {
      latency *= k->latency_scale;
      busbw *= k->bandwidth_scale;
    }
    const double seconds = latency + c.bus_bytes / busbw;
    if (seconds < best.seconds) {
      best.seconds = seconds;
      best.latency_seconds = latency;
      best.link_bus_bandwidth = busbw;
      best.algorithm = c.algorithm;
      best.protocol = c.protocol;
      best.tier = c.tier;
    }
  }
  best.algbw_bytes_per_s = bytes / best.seconds;
  best.busbw_bytes_per_s = best.algbw_bytes_per_s * bus_factor(op, layout.ranks);
  return best;
}

}  // namespace shardplan
