#include "planner/communicators.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "models/text_format.h"
#include "planner/sharding.h"

namespace shardplan {

namespace {

RankLayout layout_of(const ProcessGroup& g, const ClusterSpec& cluster) {
  return group_layout(g, cluster.gpus_per_node);
}

// What the plan's schedule runs on each mesh group (planner/schedule.cc and the modules'
// collectives); tests/planner/communicators_test.cc holds every plan's collectives to it.
std::vector<Communicator> mesh_communicators(const FsdpConfig& c, const ClusterSpec& cluster) {
  const ShardingTraits t = sharding_traits(c);
  const bool replicated = c.sharding_strategy == ShardingStrategy::no_shard;
  const bool expert_a2a = c.moe_dispatcher != MoeDispatcher::allgather;
  std::vector<Communicator> out;
  for (const ProcessGroup& g : mesh_process_groups(c)) {
    if (g.size <= 1) continue;
    Communicator k{.group = g.name, .use = {.layout = layout_of(g, cluster)}};
    CommunicatorUse& u = k.use;
    if (g.name == "tp") {
      // The vocabulary-parallel loss all-reduces small tensors; without sequence
      // parallelism every block all-reduces its activations.
      u.ring = true;
      u.bulk_all_reduce = !sequence_parallel(c);
      k.runs = u.bulk_all_reduce ? "all-reduce" : "all-gather, reduce-scatter";
    } else if (g.name == "cp") {
      if (c.cp_comm == CpComm::p2p) {
        u = ring_shift_peers(u);
        k.runs = "send/recv (ring attention)";
      } else if (c.cp_comm == CpComm::a2a) {
        u = all_to_all_peers(u);
        k.runs = "all-to-all";
      } else {
        u.ring = true;
        k.runs = "all-gather, reduce-scatter";
      }
    } else if (g.name == "dp_shard_cp" || g.name == "edp") {
      u.ring = !replicated;
      u.bulk_all_reduce = replicated;
      k.runs = replicated ? "all-reduce" : "all-gather, reduce-scatter";
    } else if (g.name == "dp_outer") {
      if (!t.hsdp) continue;
      const bool reduce = c.outer_strategy == OuterStrategy::no_shard;
      u.ring = !reduce;
      u.bulk_all_reduce = reduce;
      k.runs = reduce ? "all-reduce" : "reduce-scatter, all-gather";
    } else if (g.name == "dp") {
      u.ring = true;
      k.runs = "all-gather";
    } else if (g.name == "ep") {
      if (!expert_a2a) continue;
      u = all_to_all_peers(u);
      k.runs = "all-to-all (token dispatch)";
    } else if (g.name == "etp") {
      if (!expert_a2a) continue;
      u.ring = true;
      k.runs = "all-gather, reduce-scatter";
    } else if (g.name == "ep_etp") {
      if (expert_a2a) continue;
      u.ring = true;
      k.runs = "all-gather, reduce-scatter (token dispatch)";
    } else {
      continue;
    }
    out.push_back(std::move(k));
  }
  return out;
}

Communicator small_all_reduces(std::string group, std::string runs, const ClusterSpec& cluster,
                               int64_t ranks, int64_t stride) {
  return {.group = std::move(group),
          .runs = std::move(runs),
          .use = {.layout = layout_of({.size = ranks, .stride = stride}, cluster),
                  .small_all_reduce = true}};
}

}  // namespace

std::vector<Communicator> job_communicators(const FsdpConfig& c, const ClusterSpec& cluster) {
  std::vector<Communicator> out = mesh_communicators(c, cluster);
  const int64_t world = cluster.num_gpus;
  if (world > 1) {
    out.push_back(small_all_reduces("world", "barriers, logging", cluster, world, 1));
    if (c.stack == Stack::megatron_te) {
      // Megatron's gradient norm and zero counts run on their own world-sized group
      // (optimizer grad_stats_parallel_group: the distributed-optimizer instance group),
      // and Transformer Engine's delayed-scaling amax reduction on tp-dp-cp
      // (parallel_state.get_amax_reduction_group): both whole-world without pipelining.
      out.push_back(small_all_reduces("grad_stats", "gradient norm", cluster, world, 1));
      if (fp8_compute(c) && c.fp8_recipe == Fp8Recipe::delayed)
        out.push_back(small_all_reduces("amax", "FP8 amax reduction", cluster, world, 1));
    }
  }
  // torchtitan averages the loss over its flattened batch × cp mesh (parallel_dims.py
  // "loss_mesh"), a group of its own.
  const int64_t data = world / std::max<int64_t>(c.tp, 1);
  if (c.stack != Stack::megatron_te && data > 1)
    out.push_back(small_all_reduces("loss", "loss all-reduce", cluster, data, c.tp));
  for (Communicator& k : out) k.bytes = nccl_communicator_bytes(cluster.nccl, k.use);
  std::stable_sort(out.begin(), out.end(), [](const Communicator& a, const Communicator& b) {
    return a.bytes.total() > b.bytes.total();
  });
  return out;
}

DeviceOverhead device_overhead(const FsdpConfig& c, const ClusterSpec& cluster) {
  DeviceOverhead d;
  d.base = cluster.non_tensor_bytes;
  d.communicators = job_communicators(c, cluster);
  for (const Communicator& k : d.communicators) d.nccl += k.bytes.total();
  return d;
}

namespace {

// The plan's overhead as `cluster` gives it, or nothing when the plan says otherwise.
std::optional<DeviceOverhead> matching_overhead(const Plan& plan, const ClusterSpec& cluster) {
  DeviceOverhead d = device_overhead(plan.config, cluster);
  if (d.total() != plan.non_tensor_bytes) return std::nullopt;
  return d;
}

}  // namespace

std::string describe_non_tensor(const Plan& plan, const ClusterSpec& cluster) {
  const auto d = matching_overhead(plan, cluster);
  if (!d) return "the plan's non_tensor_bytes (CUDA context, workspaces, NCCL)";
  std::string groups;
  for (const Communicator& k : d->communicators) {
    groups += fmt::format("{}{} {}", groups.empty() ? "" : ", ", k.group,
                          format_bytes(static_cast<double>(k.bytes.total())));
  }
  return fmt::format("CUDA context and workspaces {}, NCCL {} in {} communicator{}{}",
                     format_bytes(static_cast<double>(d->base)),
                     format_bytes(static_cast<double>(d->nccl)), d->communicators.size(),
                     d->communicators.size() == 1 ? "" : "s",
                     groups.empty() ? "" : " (" + groups + ")");
}

nlohmann::json device_overhead_to_json(const Plan& plan, const ClusterSpec& cluster) {
  nlohmann::json j = {{"non_tensor_bytes", plan.non_tensor_bytes}};
  const auto d = matching_overhead(plan, cluster);
  if (!d) {
    j["breakdown"] = nullptr;
    return j;
  }
  nlohmann::json communicators = nlohmann::json::array();
  for (const Communicator& k : d->communicators) {
    communicators.push_back({{"group", k.group},
                             {"runs", k.runs},
                             {"ranks", k.use.layout.ranks},
                             {"ranks_per_node", k.use.layout.ranks_per_node},
                             {"bytes", k.bytes.total()},
                             {"metadata_bytes", k.bytes.metadata},
                             {"ring_bytes", k.bytes.ring},
                             {"tree_bytes", k.bytes.tree},
                             {"nvls_bytes", k.bytes.nvls},
                             {"p2p_bytes", k.bytes.p2p}});
  }
  j["breakdown"] = {{"base_bytes", d->base},
                    {"nccl_bytes", d->nccl},
                    {"communicators", std::move(communicators)}};
  return j;
}

}  // namespace shardplan
