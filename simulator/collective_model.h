#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster_spec.h"

namespace shardplan {

enum class Collective { all_gather, reduce_scatter, all_reduce, send_recv, all_to_all };

std::string_view collective_name(Collective c);
std::optional<Collective> parse_collective(std::string_view text);
std::vector<std::string> collective_names();

// The predicted cost of one collective, in the nccl-tests conventions: `bytes` is the
// size nccl-tests reports (all-gather: the gathered output; reduce-scatter: the input;
// all-reduce: the buffer; send/recv: what each rank sends to the next, a ring shift;
// all-to-all: each rank's send buffer), algbw = bytes / time, busbw = algbw × (n−1)/n for
// all-gather, reduce-scatter and all-to-all, × 2(n−1)/n for all-reduce, × 1 for send/recv
// (nccl-tests doc/PERFORMANCE.md, src/sendrecv.cu, src/alltoall.cu).
struct CollectiveEstimate {
  double seconds = 0;
  double latency_seconds = 0;  // the size-independent part
  double algbw_bytes_per_s = 0;
  double busbw_bytes_per_s = 0;
  double link_bus_bandwidth = 0;  // the bus bandwidth the chosen protocol runs at
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  NcclProtocol protocol = NcclProtocol::simple;
  NetworkTier tier = NetworkTier::intra_node;
};

// One way NCCL could run a collective, as its model costs it before any calibration:
// time = latency_seconds + bus_bytes ÷ bus_bandwidth.
struct CollectiveCandidate {
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  NcclProtocol protocol = NcclProtocol::simple;
  NetworkTier tier = NetworkTier::intra_node;
  double latency_seconds = 0;
  double bus_bandwidth = 0;  // bytes/s
  double bus_bytes = 0;      // bytes × the collective's bus factor
};

// Every (algorithm, protocol) that applies (at most eight; none for one rank or no bytes).
struct CollectiveCandidates {
  std::array<CollectiveCandidate, 8> items{};
  std::size_t size = 0;
  const CollectiveCandidate* begin() const { return items.data(); }
  const CollectiveCandidate* end() const { return items.data() + size; }
};
CollectiveCandidates collective_candidates(const ClusterSpec& cluster, Collective op, double bytes,
                                           const RankLayout& layout);

// The cluster's calibration of a candidate's regime (latency_scale, bandwidth_scale), or
// nullptr where it has none.
const CollectiveCalibration* calibration_of(const ClusterSpec& cluster,
                                            const CollectiveCandidate& c);

// NCCL's cost model (src/graph/tuning.cc) over the cluster's tiers: for every algorithm
// and protocol that applies, latency + bytes ÷ bandwidth; the fastest wins, as NCCL's
// tuner picks. Ring: base + (steps − inter-node steps) × NVLink hop + inter-node steps ×
// network hop, at the tier's measured bus bandwidth (a ring crossing nodes runs at the
// slower tier). Tree (all-reduce across nodes): log2(nodes) network hops each way.
// NVLS (all-reduce inside an NVSwitch node that has it). Send/recv and all-to-all are
// point-to-point transfers NCCL's tuner does not model: one Simple-protocol hop of latency
// (base + hop on the slowest tier crossed); a ring shift moves each rank's bytes to its
// neighbour at the tier's ring bus bandwidth (a ring collective's busbw is exactly that
// per-neighbour rate), an all-to-all at the NVLink busbw inside a node and, across N
// nodes, at N/(N−1) × one NIC (nccl-tests #130, #267: all-to-all cannot aggregate a
// node's NICs). A single rank costs nothing. A calibrated cluster
// (ClusterSpec::collective_calibration) scales each regime's latency and bandwidth before
// the fastest is picked.
CollectiveEstimate estimate_collective(const ClusterSpec& cluster, Collective op, double bytes,
                                       const RankLayout& layout);

}  // namespace shardplan
