#include "simulator/collective_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "models/name_table.h"

namespace shardplan {
namespace {

// A collective library's tuning constants (src/graph/tuning.cc), indexed by protocol LL,
// LL128, Simple, in microseconds; the cluster files carry the LL entries of the ring rows
// (nccl.base_latency_s, intra_node.latency_s, inter_node.latency_s).
struct TuningTable {
  std::array<double, 3> ring_base, tree_base;
  std::array<double, 3> ring_nvlink_hop, tree_nvlink_hop;  // NVLink (RCCL: XGMI)
  std::array<double, 3> ring_net_hop, tree_net_hop;
  double nvls_hop;
  bool ll128;  // LL128 runs by default
};

// NCCL v2.23-2.30 (../shared/REFERENCES.md; docs/research/nccl.md section 5.1); NVLS
// Simple only.
constexpr TuningTable kNccl = {.ring_base = {6.6, 14.0, 8.4},
                               .tree_base = {6.8, 14.0, 8.4},
                               .ring_nvlink_hop = {0.6, 1.9, 3.4},
                               .tree_nvlink_hop = {0.6, 1.25, 4.0},
                               .ring_net_hop = {2.7, 4.0, 14.0},
                               .tree_net_hop = {5.0, 8.5, 14.0},
                               .nvls_hop = 25.0,
                               .ll128 = true};

// RCCL's gfx942 (MI300X) table, tuning_model_5 (ROCm/rocm-systems projects/rccl/src/graph/
// tuning.cc @03a89144): baseLat {12, 12, 17} for ring and tree; hwLat "NVLINK" (XGMI) ring
// {0.8, 0.8, 2.1}, tree {0.9, 0.9, 2.3}; NET ring {9.5, 9.5, 320}, tree {10.5, 10.5, 25}.
// LL128 is off by default on gfx942 with 8 NICs (RCCL CHANGELOG: enabled "for gfx942 with
// 4-NIC configurations"; ROCm/rccl #1549); no NVLS. models/clusters/mi300x.json.
constexpr TuningTable kRccl = {.ring_base = {12.0, 12.0, 17.0},
                               .tree_base = {12.0, 12.0, 17.0},
                               .ring_nvlink_hop = {0.8, 0.8, 2.1},
                               .tree_nvlink_hop = {0.9, 0.9, 2.3},
                               .ring_net_hop = {9.5, 9.5, 320.0},
                               .tree_net_hop = {10.5, 10.5, 25.0},
                               .nvls_hop = 0.0,
                               .ll128 = false};

// Share of the bus bandwidth each protocol delivers: LL sends 4 bytes of data per
// 8-byte line (flag + data), so half; LL128 120 of 128 bytes, capped by NCCL at 0.92 of
// the ring bandwidth (tuning.cc); Simple all of it.
constexpr std::array<double, 3> kProtocolBandwidth = {0.5, 0.92, 1.0};

// NVLS all-reduce over NVSwitch peaks near 480 GB/s busbw on 8 × H100 where rings reach
// 360 (nccl-tests #212, nccl #1281): 4/3 of the ring's measured bus bandwidth. (Blackwell:
// 845 against 695 on 8 × B300, nccl #2140, i.e. 1.22; the model keeps 4/3.)
constexpr double kNvlsOverRing = 480.0 / 360.0;

const TuningTable& tuning_of(const ClusterSpec& cluster) {
  return cluster.nccl.library == CollectiveLibrary::rccl ? kRccl : kNccl;
}

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
  const TuningTable& t = tuning_of(cluster);
  if (op == Collective::send_recv || op == Collective::all_to_all) {
    const auto simple = static_cast<std::size_t>(NcclProtocol::simple);
    const double hop = nodes > 1 ? t.ring_net_hop[simple] : t.ring_nvlink_hop[simple];
    double busbw = ring_busbw;
    if (op == Collective::all_to_all && nodes > 1) {
      const double n_nodes = static_cast<double>(nodes);
      busbw = std::min(
          cluster.intra_node.measured_bus_bandwidth_bytes_per_s,
          cluster.inter_node.measured_bus_bandwidth_bytes_per_s * n_nodes / (n_nodes - 1.0));
    }
    add(NcclAlgorithm::p2p, NcclProtocol::simple, t.ring_base[simple] + hop, busbw);
    return out;
  }
  const double steps =
      op == Collective::all_reduce ? 2.0 * static_cast<double>(n - 1) : static_cast<double>(n - 1);
  const double net_steps =
      (op == Collective::all_reduce ? 2.0 : 1.0) * static_cast<double>(nodes - 1);
  for (NcclProtocol p : kProtocols) {
    if (p == NcclProtocol::ll128 && !t.ll128) continue;
    const auto i = static_cast<std::size_t>(p);
    const double ring_latency =
        t.ring_base[i] + (steps - net_steps) * t.ring_nvlink_hop[i] + net_steps * t.ring_net_hop[i];
    add(NcclAlgorithm::ring, p, ring_latency, ring_busbw * kProtocolBandwidth[i]);
    if (op == Collective::all_reduce && nodes > 1) {
      const double tree_latency =
          t.tree_base[i] + 2.0 * (static_cast<double>(per_node - 1) * t.tree_nvlink_hop[i] +
                                  std::log2(static_cast<double>(nodes)) * t.tree_net_hop[i]);
      add(NcclAlgorithm::tree, p, tree_latency, ring_busbw * kProtocolBandwidth[i]);
    }
  }
  if (op == Collective::all_reduce && nodes == 1 && cluster.nccl.nvls && t.nvls_hop > 0) {
    const auto simple = static_cast<std::size_t>(NcclProtocol::simple);
    add(NcclAlgorithm::nvls, NcclProtocol::simple, t.ring_base[simple] + t.nvls_hop,
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
