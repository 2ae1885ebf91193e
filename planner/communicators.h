#pragma once

// The NCCL communicators one rank of a job creates and the device memory they hold: one
// per process group that runs a collective (PyTorch creates a group's communicator on its
// first collective; Megatron-LM and torchtitan do not bind the device at init, so unused
// groups cost nothing), plus the groups each stack keeps beside the mesh. What nvidia-smi
// counts beyond the caching allocator: docs/model.md "Device memory".
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/cluster_spec.h"
#include "models/nccl_memory.h"
#include "planner/fsdp_config.h"
#include "planner/plan.h"

namespace shardplan {

struct Communicator {
  std::string group;  // a mesh group ("tp", "dp_shard_cp", ...) or "world", "grad_stats", ...
  std::string runs;   // what it runs, for people: "all-gather, reduce-scatter"
  CommunicatorUse use;
  CommunicatorBytes bytes;
};

// The communicators of a resolved config on `cluster`, largest first.
std::vector<Communicator> job_communicators(const FsdpConfig& config, const ClusterSpec& cluster);

// What one GPU holds outside PyTorch's tensors: the cluster's CUDA context and library
// workspaces (non_tensor_bytes) and every communicator's NCCL buffers.
struct DeviceOverhead {
  int64_t base = 0;  // the cluster's non_tensor_bytes
  int64_t nccl = 0;
  std::vector<Communicator> communicators;
  int64_t total() const { return base + nccl; }
};
DeviceOverhead device_overhead(const FsdpConfig& config, const ClusterSpec& cluster);

// A plan's non-tensor bytes for people ("context and workspaces 0.54 GiB, NCCL 1.1 GiB in 3
// communicators (dp_shard_cp 0.5 GiB, ...)") and as JSON ({non_tensor_bytes, base_bytes,
// nccl_bytes, communicators: [{group, runs, ranks, ranks_per_node, bytes, ...}]}). A plan
// whose non_tensor_bytes is not what `cluster` gives for its config (a plan file edited,
// or made for another cluster) is described by its own number alone.
std::string describe_non_tensor(const Plan& plan, const ClusterSpec& cluster);
nlohmann::json device_overhead_to_json(const Plan& plan, const ClusterSpec& cluster);

}  // namespace shardplan
