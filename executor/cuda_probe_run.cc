// `shardplan probe --backend cuda`: the measurements calibrate needs, on this machine's
// GPUs, through the CUDA plugin's replay interface (executor/cuda_plugin_abi.h): each
// measurement is a one-op step, timed by the plugin's CUDA events around the op alone.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/cuda_plugin_abi.h"
#include "executor/cuda_probe.h"
#include "executor/probe.h"
#include "models/error.h"

namespace shardplan {
namespace {

struct Plugin {
  int (*unique_id)(void*, ShardplanCudaError*);
  int (*open)(int, int, int, const void*, int, int, const ShardplanCudaGroup*, void**,
              ShardplanCudaError*);
  int (*alloc)(void*, long long, void**, ShardplanCudaError*);
  int (*begin)(void*, ShardplanCudaError*);
  int (*run)(void*, const ShardplanCudaOp*, ShardplanCudaError*);
  int (*end)(void*, double*, double*, ShardplanCudaError*);
  void (*close)(void*);
};

Plugin load_plugin() {
  std::string error;
  void* h = load_cuda_plugin(error);
  if (h == nullptr) throw InputError("", "--backend cuda", error);
  return {cuda_plugin_symbol<decltype(Plugin::unique_id)>(h, "shardplan_cuda_unique_id"),
          cuda_plugin_symbol<decltype(Plugin::open)>(h, "shardplan_cuda_open"),
          cuda_plugin_symbol<decltype(Plugin::alloc)>(h, "shardplan_cuda_alloc"),
          cuda_plugin_symbol<decltype(Plugin::begin)>(h, "shardplan_cuda_begin_step"),
          cuda_plugin_symbol<decltype(Plugin::run)>(h, "shardplan_cuda_run"),
          cuda_plugin_symbol<decltype(Plugin::end)>(h, "shardplan_cuda_end_step"),
          cuda_plugin_symbol<decltype(Plugin::close)>(h, "shardplan_cuda_close")};
}

class Session {
 public:
  Session(const Plugin& p, int device, int ranks, int rank, const char* id,
          const std::vector<ShardplanCudaGroup>& groups)
      : p_(p) {
    check(p_.open(device, ranks, rank, id, 1, static_cast<int>(groups.size()), groups.data(),
                  &context_, &error_));
  }
  ~Session() {
    if (context_ != nullptr) p_.close(context_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void* alloc(long long bytes) {
    void* data = nullptr;
    check(p_.alloc(context_, bytes, &data, &error_));
    return data;
  }
  // The op alone, on the device: the mean over `iterations` one-op steps after `warmup`.
  // A collective's ranks start each step together (`barrier`), so the time is the
  // collective's, not one rank waiting for a late peer.
  double time(ShardplanCudaOp op, int warmup, int iterations, MPI_Comm barrier = MPI_COMM_NULL) {
    op.id = 0;
    op.parts = 1;
    double total = 0;
    for (int i = 0; i < warmup + iterations; ++i) {
      double start = 0, end = 0;
      if (barrier != MPI_COMM_NULL) MPI_Barrier(barrier);
      check(p_.begin(context_, &error_));
      check(p_.run(context_, &op, &error_));
      check(p_.end(context_, &start, &end, &error_));
      if (i >= warmup) total += end - start;
    }
    return total / iterations;
  }

 private:
  void check(int status) {
    if (status != 0) throw std::runtime_error(error_.message);
  }
  const Plugin& p_;
  void* context_ = nullptr;
  ShardplanCudaError error_{};
};

}  // namespace

nlohmann::json run_cuda_probe(MPI_Comm world, const ProbeOptions& o,
                              const std::vector<GemmShape>& gemms) {
  require_cuda_device();
  const Plugin plugin = load_plugin();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &ranks);
  // The world and, when the job spans hosts, each host's ranks (color: its first rank).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int per_node = 1, node_rank = 0;
  MPI_Comm_size(node, &per_node);
  MPI_Comm_rank(node, &node_rank);
  int leader = rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  int most = per_node, fewest = per_node;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, world);
  MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, world);
  MPI_Comm_free(&node);
  // The per-host group only when every host has the same ranks: ncclCommSplit and the
  // per-size timings are collective over the world, so every rank must take part alike.
  const bool hosts = most < ranks && fewest == most && most > 1;
  std::vector<ShardplanCudaGroup> groups = {{.ranks = ranks, .rank = rank, .color = 0}};
  if (hosts) groups.push_back({.ranks = per_node, .rank = node_rank, .color = leader});
  char id[128] = {};
  if (ranks > 1) {
    ShardplanCudaError error{};
    if (rank == 0 && plugin.unique_id(id, &error) != 0) throw std::runtime_error(error.message);
    MPI_Bcast(id, sizeof id, MPI_BYTE, 0, world);
  }
  // Ranks on a host take its devices in order (MPI's shared-memory split, whatever the
  // launcher).
  const int devices = std::max(1, probe_cuda().device_count);
  Session session(plugin, node_rank % devices, ranks, rank, id, groups);
  // The smallest size is one float per rank, which may exceed a small --max-bytes.
  const long long capacity = std::max(static_cast<long long>(o.max_bytes), 4LL * ranks);
  char* in = static_cast<char*>(session.alloc(capacity));
  char* out = static_cast<char*>(session.alloc(capacity));

  nlohmann::json collectives = nlohmann::json::array();
  for (std::size_t g = 0; g < groups.size() && ranks > 1; ++g) {
    const int n = g == 0 ? ranks : per_node;
    if (n < 2) continue;
    for (const std::string name : kProbeCollectives) {
      const int kind = name == "all_gather"       ? kCudaAllGather
                       : name == "reduce_scatter" ? kCudaReduceScatter
                       : name == "all_reduce"     ? kCudaAllReduce
                       : name == "all_to_all"     ? kCudaAllToAll
                                                  : kCudaSendRecv;
      nlohmann::json rows = nlohmann::json::array();
      for (double size = o.min_bytes; size <= o.max_bytes; size *= 2) {
        const long long bytes = probe_message_bytes(size, n);
        ShardplanCudaOp op{};
        op.kind = kind;
        op.stream = 1;
        op.group = static_cast<int>(g);
        op.name = name.c_str();
        op.input = in;
        op.output = out;
        op.element_bytes = 4;
        switch (kind) {
          case kCudaAllGather:  // count: bytes each rank contributes (uint8)
          case kCudaAllToAll:   // count: bytes to each peer
            op.count = bytes / n;
            break;
          case kCudaReduceScatter:  // count: floats each rank keeps
            op.count = bytes / n / 4;
            break;
          case kCudaAllReduce:
            op.count = bytes / 4;
            break;
          default:  // send/recv: bytes to the next rank
            op.count = bytes;
            break;
        }
        double seconds = session.time(op, o.warmup, o.iterations, world);
        MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world);
        rows.push_back({{"bytes", static_cast<double>(bytes)}, {"seconds", seconds}});
      }
      collectives.push_back(probe_table(name, g == 0 ? "world" : "node", n, most, std::move(rows)));
    }
  }
  // This rank's GPU alone: bf16 GEMMs and device copies.
  nlohmann::json kernels = nlohmann::json::array();
  for (const GemmShape& s : gemms) {
    const long long shape[3] = {s.m, s.n, s.k};
    ShardplanCudaOp op{};
    op.kind = kCudaCompute;
    op.name = "probe gemm";
    op.gemms = shape;
    op.num_gemms = 1;
    const double seconds = session.time(op, o.warmup, o.iterations);
    kernels.push_back({{"kind", "gemm"}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"seconds", seconds}});
  }
  for (long long bytes : {64LL << 20, 256LL << 20, 1LL << 30}) {
    ShardplanCudaOp op{};
    op.kind = kCudaCompute;
    op.name = "probe copy";
    op.memory_bytes = bytes;  // read and written in all
    const double seconds = session.time(op, o.warmup, o.iterations);
    kernels.push_back(
        {{"kind", "copy"}, {"bytes", static_cast<double>(bytes)}, {"seconds", seconds}});
  }
  if (rank != 0) return {};
  return {{"probe_version", 1}, {"backend", "cuda"},      {"device", "CUDA"},
          {"ranks", ranks},     {"ranks_per_node", most}, {"collectives", collectives},
          {"kernels", kernels}};
}

}  // namespace shardplan
