#include "executor/cuda_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include "executor/cuda_plugin_abi.h"
#include "executor/cuda_probe.h"
#include "models/error.h"

namespace shardplan {

static_assert(kCudaStreams == kNumStreams, "the plugin needs one CUDA stream per plan stream");
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

class CudaBackend final : public ExecutorBackend {
 public:
  explicit CudaBackend(bool mpi) : mpi_(mpi) {
    require_cuda_device();
    std::string error;
    void* h = load_cuda_plugin(error);
    if (h == nullptr) throw InputError("", "--backend cuda", error);
    unique_id_ = cuda_plugin_symbol<decltype(unique_id_)>(h, "shardplan_cuda_unique_id");
    open_ = cuda_plugin_symbol<decltype(open_)>(h, "shardplan_cuda_open");
    alloc_ = cuda_plugin_symbol<decltype(alloc_)>(h, "shardplan_cuda_alloc");
    host_alloc_ = cuda_plugin_symbol<decltype(host_alloc_)>(h, "shardplan_cuda_host_alloc");
    begin_ = cuda_plugin_symbol<decltype(begin_)>(h, "shardplan_cuda_begin_step");
    run_ = cuda_plugin_symbol<decltype(run_)>(h, "shardplan_cuda_run");
    end_ = cuda_plugin_symbol<decltype(end_)>(h, "shardplan_cuda_end_step");
    memory_ = cuda_plugin_symbol<decltype(memory_)>(h, "shardplan_cuda_memory");
    close_ = cuda_plugin_symbol<decltype(close_)>(h, "shardplan_cuda_close");
    if (mpi_) {
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
  }
  ~CudaBackend() override {
    if (context_ != nullptr) close_(context_);
  }

  std::string_view name() const override { return "cuda"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  bool device_timed() const override { return true; }

  void prepare(const Plan& plan) override {
    plan_ = &plan;
    // One NCCL communicator over the world, split per process group a collective runs
    // over (ncclCommSplit, as Megatron and PyTorch build theirs): one id, made by rank 0.
    std::vector<bool> used(plan.process_groups.size(), false);
    for (const PlanOp& op : plan.ops) {
      if (op.group >= 0) used[static_cast<std::size_t>(op.group)] = true;
    }
    std::vector<ShardplanCudaGroup> groups(plan.process_groups.size());
    for (std::size_t g = 0; g < plan.process_groups.size(); ++g) {
      const ProcessGroup& pg = plan.process_groups[g];
      groups[g] = ShardplanCudaGroup{.ranks = used[g] ? static_cast<int>(pg.size) : 1,
                                     .rank = static_cast<int>(group_rank(pg, rank_)),
                                     .color = static_cast<int>(group_instance(pg, rank_))};
    }
    char world_id[128] = {};
    if (mpi_ && size_ > 1) {
      if (rank_ == 0) check(unique_id_(world_id, &error_));
      MPI_Bcast(world_id, sizeof world_id, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    // Ranks on a node take its devices in order.
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0));
    const int devices = std::max(1, probe_cuda().device_count);
    check(open_(local % devices, size_, rank_, world_id, static_cast<int>(plan.ops.size()),
                static_cast<int>(groups.size()), groups.data(), &context_, &error_));
    // Pinned host memory for each offloaded layer and micro-batch, as Transformer Engine
    // keeps a CPU copy per offloaded tensor.
    for (const PlanOp& op : plan.ops) {
      if (op.kind != OpKind::offload) continue;
      void* p = nullptr;
      check(host_alloc_(context_, static_cast<long long>(op.bytes), &p, &error_));
      host_[{op.unit, op.micro_batch}] = p;
    }
  }

  std::byte* allocate(int64_t bytes) override {
    void* p = nullptr;
    check(alloc_(context_, bytes, &p, &error_));
    return static_cast<std::byte*>(p);
  }
  void release(std::byte*) override {}  // freed with the context

  void initialise(const std::vector<BufferSpan>&) override {}  // zeroed by alloc

  void begin_step(int) override { check(begin_(context_, &error_)); }

  void run(const PlanOp& op, const std::vector<BufferSpan>& reads,
           const std::vector<BufferSpan>& writes) override {
    ShardplanCudaOp c{};
    c.stream = static_cast<int>(op.stream);
    c.group = static_cast<int>(op.group);
    c.id = op.id;
    static_assert(sizeof(long long) == sizeof(int64_t));
    c.deps = reinterpret_cast<const long long*>(op.deps.data());
    c.num_deps = static_cast<int>(op.deps.size());
    c.name = op.name.c_str();
    c.parts = 1;
    std::vector<ShardplanCudaOp> calls;
    const int p = static_cast<int>(op_group_size(*plan_, op));
    const int me = op.group >= 0
                       ? static_cast<int>(group_rank(
                             plan_->process_groups[static_cast<std::size_t>(op.group)], rank_))
                       : 0;
    if (is_model_parallel(op, writes)) {
      // Tensor- and context-parallel collectives, in NCCL's in-place layouts.
      const int64_t e = dtype_bytes(writes[0].buffer->dtype);
      const CollectivePart part = model_parallel_part(op, writes[0], me, p, e);
      c.element_bytes = static_cast<int>(e);
      c.input = part.input;
      c.output = part.output;
      switch (op.kind) {
        case OpKind::all_gather:
          c.kind = kCudaAllGather;  // counted in bytes (uint8)
          c.element_bytes = 1;
          c.count = part.input_bytes;
          break;
        case OpKind::reduce_scatter:
          c.kind = kCudaReduceScatter;
          c.count = part.output_bytes / e;
          break;
        case OpKind::all_reduce:
          c.kind = kCudaAllReduce;
          c.count = part.output_bytes / e;
          break;
        case OpKind::send_recv:
          c.kind = kCudaSendRecv;
          c.element_bytes = 1;
          c.count = part.input_bytes;
          break;
        default:
          c.kind = kCudaAllToAll;
          c.element_bytes = 1;
          c.count = part.input_bytes / std::max(p, 1);
          break;
      }
      calls.push_back(c);
    } else {
      fsdp_calls(c, op, reads, writes, p, me, calls);
    }
    if (calls.empty()) calls.push_back(c);
    for (std::size_t k = 0; k < calls.size(); ++k) {
      calls[k].part = static_cast<int>(k);
      calls[k].parts = static_cast<int>(calls.size());
      check(run_(context_, &calls[k], &error_));
    }
  }

  // Compute, the optimizer step and FSDP's collectives: one call per parameter group.
  void fsdp_calls(ShardplanCudaOp c, const PlanOp& op, const std::vector<BufferSpan>& reads,
                  const std::vector<BufferSpan>& writes, int p, int me,
                  std::vector<ShardplanCudaOp>& calls) {
    switch (op.kind) {
      case OpKind::send_recv:
      case OpKind::all_to_all:
        break;  // only tensor- and context-parallel ones exist
      case OpKind::offload:
      case OpKind::reload: {
        void* host = host_.at({op.unit, op.micro_batch});
        const bool out = op.kind == OpKind::offload;
        const BufferSpan& device = out ? reads.at(0) : writes.at(0);
        c.kind = kCudaCopy;
        c.input = out ? device.data : host;
        c.output = out ? host : device.data;
        c.count = std::min(device.bytes, static_cast<int64_t>(op.bytes));
        calls.push_back(c);
        break;
      }
      case OpKind::forward:
      case OpKind::backward:
      case OpKind::recompute:
        c.kind = kCudaCompute;
        c.gemm_flops = op.flops - op.attention_flops;
        c.attention_flops = op.attention_flops;
        c.memory_bytes = static_cast<long long>(op.bytes);
        shapes_.clear();
        for (const GemmShape& g : op_gemms(*plan_, op))
          shapes_.insert(shapes_.end(), {g.m, g.n, g.k});
        c.gemms = shapes_.data();
        c.num_gemms = static_cast<int>(shapes_.size() / 3);
        calls.push_back(c);
        break;
      case OpKind::optimizer_step:
        c.kind = kCudaOptimizer;
        for (const BufferSpan& w : writes) {
          // What the optimizer steps: the master weights (PyTorch FSDP's are the sharded
          // parameters) and the states, fp32 or, on the torch stacks, the parameters' dtype;
          // the kernel reads and writes their bytes as fp32 words.
          const BufferRole role = w.buffer->role;
          if (role != BufferRole::main_weight && role != BufferRole::optimizer_state &&
              !(role == BufferRole::model_weight && torch_fsdp_layout(plan_->config)))
            continue;
          c.output = w.data;
          c.count = w.bytes / 4;
          calls.push_back(c);
        }
        if (calls.empty()) calls.push_back(c);
        break;
      case OpKind::all_gather:
      case OpKind::reduce_scatter:
      case OpKind::all_reduce:
        c.kind = op.kind == OpKind::all_gather       ? kCudaAllGather
                 : op.kind == OpKind::reduce_scatter ? kCudaReduceScatter
                                                     : kCudaAllReduce;
        for (const CollectivePart& part : collective_parts(*plan_, op, reads, writes)) {
          // NCCL counts elements; in place, a rank's region starts at rank × count.
          const int e = c.kind == kCudaAllGather
                            ? 1
                            : static_cast<int>(dtype_bytes(part.target.buffer->dtype));
          c.element_bytes = e;
          c.output = part.output;
          c.cast_source = nullptr;
          c.cast_bytes = 0;
          if (part.cast_from > 0 && c.kind == kCudaAllGather) {
            c.count = part.output_bytes / p;
            c.input = part.output + me * c.count;
            c.cast_source = part.input;
            c.cast_bytes = c.count;  // the slice's bytes: 4 of the cast's 6 per bf16 element
          } else if (c.kind == kCudaAllReduce) {
            c.input = part.output;
            c.count = part.output_bytes / e;
          } else if (!part.in_place) {
            c.input = part.input;
            c.count = (c.kind == kCudaAllGather ? part.input_bytes : part.output_bytes) / e;
            if (part.cast_source != nullptr) {  // the reduce-scatter's bf16 gradients
              c.cast_source = part.cast_source;
              c.cast_bytes = part.input_bytes / part.cast_to * part.cast_from;
            }
            // Reduced in a wider dtype than the gradients it lands in (fp32 into bf16):
            // NCCL reduces in place in the input, in its element size; the cast of the
            // shard into the target (an elementwise kernel) is not run.
            const int r = part.input_element_bytes;
            if (c.kind == kCudaReduceScatter && r > e) {
              c.element_bytes = r;
              c.output = part.input + static_cast<std::ptrdiff_t>(me) * c.count * r;
            }
          } else {
            c.count = part.output_bytes / e / p;
            c.input = c.kind == kCudaAllGather ? part.output + me * c.count * e : part.output;
            if (c.kind == kCudaReduceScatter) c.output = part.output + me * c.count * e;
          }
          calls.push_back(c);
        }
        break;
    }
  }

  void end_step(std::vector<double>& start, std::vector<double>& end) override {
    check(end_(context_, start.data(), end.data(), &error_));
  }

  double now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  double max_over_ranks(double seconds) override {
    if (!mpi_) return seconds;
    double out = 0;
    MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  }

  int64_t device_memory_used() override {
    long long free_bytes = 0, total = 0;
    check(memory_(context_, &free_bytes, &total, &error_));
    return total - free_bytes;
  }

 private:
  void check(int status) {
    if (status != 0) throw std::runtime_error(std::string("CUDA backend: ") + error_.message);
  }

  std::vector<long long> shapes_;
  std::map<std::pair<int64_t, int64_t>, void*> host_;  // (unit, micro-batch) -> pinned copy
  bool mpi_ = false;
  int rank_ = 0, size_ = 1;
  const Plan* plan_ = nullptr;
  void* context_ = nullptr;
  ShardplanCudaError error_{};
  int (*unique_id_)(void*, ShardplanCudaError*) = nullptr;
  int (*open_)(int, int, int, const void*, int, int, const ShardplanCudaGroup*, void**,
               ShardplanCudaError*) = nullptr;
  int (*alloc_)(void*, long long, void**, ShardplanCudaError*) = nullptr;
  int (*host_alloc_)(void*, long long, void**, ShardplanCudaError*) = nullptr;
  int (*begin_)(void*, ShardplanCudaError*) = nullptr;
  int (*run_)(void*, const ShardplanCudaOp*, ShardplanCudaError*) = nullptr;
  int (*end_)(void*, double*, double*, ShardplanCudaError*) = nullptr;
  int (*memory_)(void*, long long*, long long*, ShardplanCudaError*) = nullptr;
  void (*close_)(void*) = nullptr;
};

}  // namespace

std::unique_ptr<ExecutorBackend> make_cuda_backend(bool mpi) {
  return std::make_unique<CudaBackend>(mpi);
}

}  // namespace shardplan
