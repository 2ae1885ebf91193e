#include "executor/cpu_backend.h"

#include <fmt/format.h>
#include <mpi.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "models/error.h"

namespace shardplan {
namespace {

// Weights: byte j of a buffer's full (unsharded) contents, the same on every rank.
std::byte weight_byte(int64_t buffer, int64_t j) {
  return static_cast<std::byte>((buffer * 131 + j * 7 + 3) & 0xFF);
}

// Activations and other compute outputs: rank-specific bytes.
std::byte activation_byte(int rank, int64_t buffer, int64_t j) {
  return static_cast<std::byte>((rank * 17 + buffer * 13 + j) & 0xFF);
}

// Gradients: small per-rank integers in the element type (sums never overflow).
uint64_t gradient_value(int rank, int64_t buffer, int64_t element, int64_t micro_batch) {
  return static_cast<uint64_t>((rank + 1) * ((buffer + element + micro_batch) % 5 + 1));
}

uint64_t fingerprint(const std::byte* data, int64_t bytes) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (int64_t i = 0; i < bytes; ++i) {
    h ^= static_cast<uint64_t>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

MPI_Datatype element_type(int64_t element_bytes) {
  switch (element_bytes) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    default:
      return MPI_UINT64_T;
  }
}

uint64_t load(const std::byte* p, int64_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, static_cast<std::size_t>(size));
  return v;
}

void store(std::byte* p, int64_t size, uint64_t v) {
  std::memcpy(p, &v, static_cast<std::size_t>(size));
}

uint64_t mask(int64_t size) {
  return size >= 8 ? ~uint64_t{0} : ((uint64_t{1} << (8 * size)) - 1);
}

// Splits `total` units over `parts` ranks: equal shares, the remainder to the last.
std::vector<int> shares(int64_t total, int parts) {
  std::vector<int> counts(static_cast<std::size_t>(parts), static_cast<int>(total / parts));
  counts.back() += static_cast<int>(total % parts);
  return counts;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

class CpuBackend final : public ExecutorBackend {
 public:
  explicit CpuBackend(const ReplayOptions& options) : options_(options) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~CpuBackend() override {
    for (MPI_Comm& c : comms_) {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
  }

  std::string_view name() const override { return "cpu"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void prepare(const Plan& plan) override {
    plan_ = &plan;
    // One communicator per process group, split as the plan lays the group out.
    comms_.assign(plan.process_groups.size(), MPI_COMM_NULL);
    for (std::size_t g = 0; g < plan.process_groups.size(); ++g) {
      MPI_Comm_split(MPI_COMM_WORLD,
                     static_cast<int>(group_instance(plan.process_groups[g], rank_)), rank_,
                     &comms_[g]);
    }
  }

  std::byte* allocate(int64_t bytes) override {
    auto* p = static_cast<std::byte*>(
        std::aligned_alloc(256, static_cast<std::size_t>((bytes + 255) / 256 * 256)));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void release(std::byte* data) override { std::free(data); }

  void initialise(const std::vector<BufferSpan>& persistent) override {
    persistent_ = persistent;
    for (const BufferSpan& s : persistent) {
      const PlanBuffer& b = *s.buffer;
      if (b.role == BufferRole::model_weight) {
        // A ZeRO-3 shard is its rank's slice of the full contents.
        const int64_t base = shard_position(b) * b.bytes;
        for (int64_t j = 0; j < b.bytes; ++j) s.data[j] = weight_byte(b.id, base + j);
      } else {
        std::memset(s.data, 0, static_cast<std::size_t>(b.bytes));
      }
    }
  }

  void begin_step(int step) override {
    step_ = step;
    written_.clear();
    accumulated_through_.clear();
    // Each step accumulates its gradients from zero (Megatron zeroes main grads).
    for (const BufferSpan& s : persistent_) {
      if (s.buffer->role == BufferRole::main_grad)
        std::memset(s.data, 0, static_cast<std::size_t>(s.bytes));
    }
  }

  double now() override { return MPI_Wtime(); }

  void check_plan(const Plan& plan) const override {
    check_matmuls(plan);
    // A collective's buffers go to MPI whole: their bytes (and element counts) are int.
    for (const PlanOp& op : plan.ops) {
      if (!is_collective(op.kind)) continue;
      for (const auto* list : {&op.reads, &op.writes}) {
        for (int64_t id : *list) {
          const PlanBuffer& b = plan.buffers[static_cast<std::size_t>(id)];
          if (b.bytes > cpu_backend_limits::kMaxCollectiveBufferBytes)
            throw InputError(
                "plan", fmt::format("/buffers/{}/bytes", b.id),
                fmt::format("op {} '{}' moves buffer '{}' of {} bytes; the CPU backend's MPI "
                            "calls count in int (at most {} bytes): run it with --backend cuda",
                            op.id, op.name, b.name, b.bytes,
                            cpu_backend_limits::kMaxCollectiveBufferBytes));
        }
      }
    }
  }

  double max_over_ranks(double seconds) override {
    double out = 0;
    MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  }

  void run(const PlanOp& op, const std::vector<BufferSpan>& reads,
           const std::vector<BufferSpan>& writes) override {
    if (options_.check) {
      for (const BufferSpan& s : reads) check_canary(op, s);
    }
    if (is_model_parallel(op, writes)) {
      model_parallel(op, writes[0]);
      written_[writes[0].buffer->id] = fingerprint(writes[0].data, writes[0].bytes);
      return;
    }
    switch (op.kind) {
      case OpKind::forward:
      case OpKind::recompute:
      case OpKind::backward:
        compute(op, writes);
        break;
      case OpKind::optimizer_step:
        // Memory-bound over the local shard; values stay, so weights keep their pattern.
        for (const BufferSpan& s : writes)
          std::memmove(s.data, s.data, static_cast<std::size_t>(s.bytes));
        break;
      case OpKind::all_gather:
        all_gather(op, reads, writes);
        break;
      case OpKind::reduce_scatter:
      case OpKind::all_reduce:
        reduce(op, reads, writes);
        break;
      case OpKind::send_recv:
      case OpKind::all_to_all:
        throw std::logic_error(fmt::format("op {} '{}' writes no tp or cp buffer", op.id, op.name));
      case OpKind::offload:
        offload(op, reads.at(0));
        break;
      case OpKind::reload:
        reload(op, writes.at(0));
        break;
    }
    for (const BufferSpan& s : writes) {
      if (!s.buffer->persistent) written_[s.buffer->id] = fingerprint(s.data, s.bytes);
    }
  }

 private:
  [[noreturn]] void fail(const PlanOp& op, const BufferSpan& s, int64_t offset,
                         const std::string& what) const {
    throw IntegrityError(fmt::format(
        "rank {}: op {} '{}': buffer {} '{}' at byte {} (pool offset {}): {}", rank_, op.id,
        op.name, s.buffer->id, s.buffer->name, offset,
        s.buffer->persistent ? std::string("-") : std::to_string(s.buffer->offset + offset), what));
  }

  void check_canary(const PlanOp& op, const BufferSpan& s) {
    if (s.buffer->persistent) return;
    const auto it = written_.find(s.buffer->id);
    if (it == written_.end()) fail(op, s, 0, "read before anything wrote it");
    if (fingerprint(s.data, s.bytes) != it->second) {
      fail(op, s, 0, "changed since it was written (another buffer overwrote its bytes)");
    }
  }

  MPI_Comm comm(const PlanOp& op) const { return comms_[static_cast<std::size_t>(op.group)]; }

  // The reduced matmuls fit the backend's memory and time (cpu_backend_limits): a plan
  // that would run for hours, or allocate more than the host has, is refused up front
  // with the scale that fits.
  void check_matmuls(const Plan& plan) const {
    const double scale = options_.compute_scale;
    double step_flops = 0, largest_bytes = 0;
    const PlanOp* largest = nullptr;
    for (const PlanOp& op : plan.ops) {
      if (op.kind != OpKind::forward && op.kind != OpKind::backward && op.kind != OpKind::recompute)
        continue;
      for (const GemmShape& g : op_gemms(plan, op)) {
        const GemmShape r = cpu_reduced_gemm(g, scale);
        const auto [m, n, k] = std::array<double, 3>{
            static_cast<double>(r.m), static_cast<double>(r.n), static_cast<double>(r.k)};
        step_flops += 2 * m * n * k;
        const double operand_bytes = 4 * (m * k + k * n + m * n);
        if (operand_bytes > largest_bytes) {
          largest_bytes = operand_bytes;
          largest = &op;
        }
      }
    }
    using cpu_backend_limits::kMaxGemmBytes;
    using cpu_backend_limits::kMaxStepFlops;
    if (step_flops <= kMaxStepFlops && largest_bytes <= kMaxGemmBytes) return;
    // FLOPs shrink as the scale, operands as its 2/3 power (dimensions shrink as its cube
    // root); dimensions already at 1 shrink no further, so this is an estimate.
    const double fits = scale * std::min({1.0, kMaxStepFlops / step_flops,
                                          std::pow(kMaxGemmBytes / largest_bytes, 1.5)});
    throw InputError(
        "", "--compute-scale",
        fmt::format("at {:g} the CPU backend would run {:.3g} FLOPs of matmuls per step (its "
                    "limit: {:.0e}, about 30 s on one core) and hold up to {:.3g} bytes of "
                    "operands in one (op {} '{}'; its limit: {:.3g}); about {:.2g} fits",
                    scale, step_flops, kMaxStepFlops, largest_bytes, largest->id, largest->name,
                    kMaxGemmBytes, fits));
  }

  // Which slice of a sharded buffer this rank holds (0 for a whole one).
  int64_t shard_position(const PlanBuffer& b) const {
    if (b.shard_group < 0) return 0;
    return group_rank(plan_->process_groups[static_cast<std::size_t>(b.shard_group)], rank_);
  }

  void compute(const PlanOp& op, const std::vector<BufferSpan>& writes) {
    // The work: the layer's matmuls (two per matmul in backward), shrunk by the compute
    // scale (within check_plan's limits).
    for (const GemmShape& g : op_gemms(*plan_, op)) {
      const GemmShape r = cpu_reduced_gemm(g, options_.compute_scale);
      const Eigen::MatrixXf a = Eigen::MatrixXf::Constant(r.m, r.k, 0.5f);
      const Eigen::MatrixXf b = Eigen::MatrixXf::Constant(r.k, r.n, 0.25f);
      const Eigen::MatrixXf c = a * b;
      sink_ += c(0, 0);
    }
    // no_sync: the backward's gradients are keyed by the accumulator they go into (the
    // next one in `writes`: a unit's dense and expert parameters have one each), so the
    // reduce-scatter can check each accumulator against their sum over micro-batches.
    std::vector<int64_t> accumulator(writes.size(), -1);
    for (std::size_t i = writes.size(), next = 0; i-- > 0;) {
      if (writes[i].buffer->role == BufferRole::accumulated_grad) next = i + 1;
      if (next > 0) accumulator[i] = writes[next - 1].buffer->id;
    }
    const BufferSpan* fresh_grads = nullptr;  // this backward's own gradients
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const BufferSpan& s = writes[i];
      const PlanBuffer& buf = *s.buffer;
      if (buf.role == BufferRole::accumulated_grad) {
        accumulate(s, fresh_grads, op.micro_batch);
      } else if (buf.role == BufferRole::unsharded_grad || buf.role == BufferRole::main_grad) {
        if (buf.role == BufferRole::unsharded_grad) fresh_grads = &s;
        const int64_t e = dtype_bytes(buf.dtype);
        const uint64_t m = mask(e);
        const int64_t key = accumulator[i] >= 0 ? accumulator[i] : buf.id;
        for (int64_t k = 0; k + e <= s.bytes; k += e) {
          const uint64_t g = gradient_value(rank_, key, k / e, op.micro_batch) & m;
          // Transient gradient buffers are written; persistent main grads accumulate.
          const uint64_t v = buf.persistent ? (load(s.data + k, e) + g) & m : g;
          store(s.data + k, e, v);
        }
      } else if (!buf.persistent) {
        for (int64_t j = 0; j < s.bytes; ++j) s.data[j] = activation_byte(rank_, buf.id, j);
      }
    }
  }

  // no_sync: the unit's gradients summed across micro-batches, as FSDP2's post-backward
  // does: the backward's param_dtype gradients (`fresh`, written first by the same op)
  // widened into the accumulator, or, without one, the gradients computed straight into
  // it. The first micro-batch assigns, the later ones add.
  void accumulate(const BufferSpan& acc, const BufferSpan* fresh, int64_t micro_batch) {
    // A unit of several segments (the root's embedding and output layer) backs each of
    // them into the one accumulator: its micro-batch's gradients count once.
    const auto [last, added] = accumulated_through_.try_emplace(acc.buffer->id, micro_batch);
    if (!added && last->second == micro_batch) return;
    last->second = micro_batch;
    const int64_t e = dtype_bytes(acc.buffer->dtype);
    const uint64_t m = mask(e);
    const bool first = added;
    std::vector<std::byte> widened;
    if (fresh != nullptr) {
      const auto from = static_cast<int>(dtype_bytes(fresh->buffer->dtype));
      widened.resize(static_cast<std::size_t>(fresh->bytes / from * e));
      cast_elements(fresh->data, fresh->bytes, from, static_cast<int>(e), widened.data());
    }
    for (int64_t k = 0; k + e <= acc.bytes; k += e) {
      const uint64_t g = fresh != nullptr && k + e <= static_cast<int64_t>(widened.size())
                             ? load(widened.data() + k, e)
                             : gradient_value(rank_, acc.buffer->id, k / e, micro_batch) & m;
      store(acc.data + k, e, first ? g : (load(acc.data + k, e) + g) & m);
    }
  }

  // What no_sync's accumulator must hold when the last micro-batch reduces it: every
  // micro-batch's gradients so far (param_dtype values, widened to its dtype), summed.
  void check_accumulated(const PlanOp& op, const BufferSpan& acc) {
    const int64_t e = dtype_bytes(acc.buffer->dtype);
    const int64_t from = std::min<int64_t>(e, dtype_bytes(plan_->config.param_dtype));
    const int shift = static_cast<int>(8 * (e - from));
    for (int64_t k = 0; k + e <= acc.bytes; k += e) {
      uint64_t sum = 0;
      for (int64_t mb = 0; mb <= op.micro_batch; ++mb)
        sum += (gradient_value(rank_, acc.buffer->id, k / e, mb) & mask(from)) << shift;
      if ((sum & mask(e)) != load(acc.data + k, e))
        fail(op, acc, k,
             fmt::format("does not hold the sum of micro-batches 0..{}'s gradients",
                         op.micro_batch));
    }
  }

  void all_gather(const PlanOp& op, const std::vector<BufferSpan>& reads,
                  const std::vector<BufferSpan>& writes) {
    MPI_Comm c = comm(op);
    int p = 0;
    MPI_Comm_size(c, &p);
    int me = 0;
    MPI_Comm_rank(c, &me);
    for (const CollectivePart& part : collective_parts(*plan_, op, reads, writes)) {
      const BufferSpan& out = part.target;
      if (part.cast_from > 0) {
        // PyTorch FSDP: the shard cast into this rank's slice, gathered in place.
        const int64_t slice = part.output_bytes / p;
        cast_elements(part.input, part.input_bytes, part.cast_from, part.cast_to,
                      part.output + me * slice);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, part.output, static_cast<int>(slice),
                      MPI_BYTE, c);
        if (options_.check) {
          const int64_t offset = part.output - out.data;
          const int from = part.cast_from, to = part.cast_to;
          for (int64_t j = 0; j < part.output_bytes; ++j) {
            // Byte j is byte j % to of element j / to's top bytes in the whole fp32 weights.
            const int64_t source_byte = j / to * from + (from - to) + j % to;
            if (part.output[j] != weight_byte(part.source.buffer->id, source_byte))
              fail(op, out, offset + j,
                   fmt::format("does not hold rank {}'s cast shard of buffer {}", j / slice,
                               part.source.buffer->id));
          }
        }
        continue;
      }
      if (!part.in_place) {
        // ZeRO-3: every rank's shard into the group's region of the unsharded buffer.
        MPI_Allgather(part.input, static_cast<int>(part.input_bytes), MPI_BYTE, part.output,
                      static_cast<int>(part.input_bytes), MPI_BYTE, c);
        if (options_.check) {
          const int64_t offset = part.output - out.data;
          for (int64_t j = 0; j < part.output_bytes; ++j) {
            if (part.output[j] != weight_byte(part.source.buffer->id, j))
              fail(op, out, offset + j,
                   fmt::format("does not hold rank {}'s shard of buffer {}", j / part.input_bytes,
                               part.source.buffer->id));
          }
        }
        continue;
      }
      // In place: each rank's region of the weight buffer to every rank.
      const std::vector<int> counts = shares(out.bytes, p);
      const std::vector<int> displs = displacements(counts);
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, counts.data(), displs.data(),
                     MPI_BYTE, c);
      if (options_.check) {
        const int64_t base = shard_position(*out.buffer) * out.bytes;
        for (int64_t j = 0; j < out.bytes; ++j) {
          if (out.data[j] != weight_byte(out.buffer->id, base + j))
            fail(op, out, j, "the gathered weights differ from every rank's shard");
        }
      }
    }
  }

  // Activation offload: the layer's saved bytes to host memory and back; what comes back
  // must be what its forward wrote (written_ holds the fingerprint the forward left).
  void offload(const PlanOp& op, const BufferSpan& activations) {
    HostCopy& copy = host_[{op.unit, op.micro_batch}];
    copy.bytes.assign(activations.data, activations.data + activations.bytes);
    const auto written = written_.find(activations.buffer->id);
    copy.fingerprint = written == written_.end() ? 0 : written->second;
  }
  void reload(const PlanOp& op, const BufferSpan& target) {
    const auto it = host_.find({op.unit, op.micro_batch});
    if (it == host_.end()) fail(op, target, 0, "reloaded before its layer was offloaded");
    const HostCopy& copy = it->second;
    if (static_cast<int64_t>(copy.bytes.size()) != target.bytes)
      fail(op, target, 0,
           fmt::format("{} bytes offloaded, {} to reload", copy.bytes.size(), target.bytes));
    std::memcpy(target.data, copy.bytes.data(), copy.bytes.size());
    if (options_.check && fingerprint(target.data, target.bytes) != copy.fingerprint)
      fail(op, target, 0, "the reloaded activations are not what the layer's forward saved");
    host_.erase(it);
  }

  void reduce(const PlanOp& op, const std::vector<BufferSpan>& reads,
              const std::vector<BufferSpan>& writes) {
    MPI_Comm c = comm(op);
    int p = 0, me = 0;
    MPI_Comm_size(c, &p);
    MPI_Comm_rank(c, &me);
    const bool all_reduce = op.kind == OpKind::all_reduce;
    // no_sync: the accumulator the reduction reads, checked once (every part reads a region
    // of it).
    if (options_.check && !reads.empty() && reads[0].buffer->role == BufferRole::accumulated_grad)
      check_accumulated(op, reads[0]);
    for (const CollectivePart& part : collective_parts(*plan_, op, reads, writes)) {
      const BufferSpan& w = part.target;
      const int64_t e = dtype_bytes(w.buffer->dtype);
      const uint64_t m = mask(e);
      // The reduction's element size: the input's, which may be wider than the target's
      // (fp32 reduced into bf16 gradients keep each sum's top bytes, as a cast to bf16).
      const int64_t r = part.input_element_bytes > 0 ? part.input_element_bytes : e;
      const MPI_Datatype type = element_type(r);
      const uint64_t mr = mask(r);
      const int narrow = static_cast<int>(8 * (r - e));
      // PyTorch FSDP's copy-in: the backward's gradients widened into the reduce input.
      if (part.cast_source != nullptr) {
        cast_elements(part.cast_source, part.input_bytes / part.cast_to * part.cast_from,
                      part.cast_from, part.cast_to, part.input);
      }
      const std::byte* input = part.input;
      const int64_t input_bytes = part.input_bytes;
      // The expected sums come from every rank's input, gathered apart from the reduction.
      std::vector<std::byte> everyone;
      if (options_.check) {
        everyone.resize(static_cast<std::size_t>(input_bytes * p));
        MPI_Allgather(input, static_cast<int>(input_bytes), MPI_BYTE, everyone.data(),
                      static_cast<int>(input_bytes), MPI_BYTE, c);
      }
      const int64_t elements = input_bytes / r;
      std::vector<std::byte> result;
      int64_t result_start = 0;  // first element of the result within the input
      if (all_reduce) {
        result.assign(input, input + input_bytes);
        MPI_Allreduce(MPI_IN_PLACE, result.data(), static_cast<int>(elements), type, MPI_SUM, c);
      } else {
        const std::vector<int> counts = shares(elements, p);
        const std::vector<int> displs = displacements(counts);
        result.resize(static_cast<std::size_t>(counts[static_cast<std::size_t>(me)] * r));
        std::vector<std::byte> send(input, input + input_bytes);
        MPI_Reduce_scatter(send.data(), result.data(), counts.data(), type, MPI_SUM, c);
        result_start = displs[static_cast<std::size_t>(me)];
      }
      const int64_t result_elements = static_cast<int64_t>(result.size()) / r;
      if (options_.check) {
        for (int64_t k = 0; k < result_elements; ++k) {
          uint64_t sum = 0;
          for (int q = 0; q < p; ++q)
            sum += load(everyone.data() + q * input_bytes + (result_start + k) * r, r);
          if ((sum & mr) != load(result.data() + k * r, r))
            fail(op, w, (result_start + k) * e, "the reduction is not the sum over ranks");
        }
      }
      // Into the main grads: a scattered shard accumulates into its shard buffer; in
      // place, the reduced region replaces the local values. PyTorch FSDP's transient
      // grads are made by the step's first reduction (micro-batch 0, or the last under
      // no_sync), then accumulate.
      const bool assign = !w.buffer->persistent && !written_.contains(w.buffer->id);
      if (!part.in_place) {
        for (int64_t k = 0; k < result_elements && k * e < w.bytes; ++k) {
          const uint64_t reduced = load(result.data() + k * r, r) >> narrow;
          store(w.data + k * e, e, assign ? reduced : (load(w.data + k * e, e) + reduced) & m);
        }
      } else {
        std::memcpy(w.data + result_start * e, result.data(), result.size());
      }
    }
  }

  // A tensor- or context-parallel collective on activation-like data: each rank's input is
  // a pattern of its position in the group and the op, so every rank can check what it
  // received (gathered chunks, sums, the ring neighbour's chunk, every peer's block).
  void model_parallel(const PlanOp& op, const BufferSpan& buffer) {
    MPI_Comm c = comm(op);
    int p = 0, me = 0;
    MPI_Comm_size(c, &p);
    MPI_Comm_rank(c, &me);
    const int64_t e = dtype_bytes(buffer.buffer->dtype);
    const CollectivePart part = model_parallel_part(op, buffer, me, p, e);
    auto pattern = [&](int q, int64_t j) { return activation_byte(q, op.id, j); };
    auto fill = [&](std::byte* data, int64_t bytes, int q, int64_t from) {
      for (int64_t j = 0; j < bytes; ++j) data[j] = pattern(q, from + j);
    };
    const int64_t chunk = part.input_bytes;
    switch (op.kind) {
      case OpKind::all_gather: {
        fill(part.input, chunk, me, me * chunk);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, part.output, static_cast<int>(chunk),
                      MPI_BYTE, c);
        if (!options_.check) break;
        for (int64_t j = 0; j < part.output_bytes; ++j) {
          if (part.output[j] != pattern(static_cast<int>(j / chunk), j))
            fail(op, buffer, j, fmt::format("does not hold the group's rank {} chunk", j / chunk));
        }
        break;
      }
      case OpKind::reduce_scatter:
      case OpKind::all_reduce: {
        // Small integers, so sums never overflow an element (Open MPI's vectorised sums
        // of 16-bit integers saturate rather than wrap).
        const int64_t elements = part.input_bytes / e;
        auto value = [&](int q, int64_t k) { return gradient_value(q, op.id, k, 0); };
        for (int64_t k = 0; k < elements; ++k) store(part.input + k * e, e, value(me, k));
        const bool all = op.kind == OpKind::all_reduce;
        if (all) {
          MPI_Allreduce(MPI_IN_PLACE, part.output, static_cast<int>(elements), element_type(e),
                        MPI_SUM, c);
        } else {
          std::vector<std::byte> send(part.input, part.input + part.input_bytes);
          const std::vector<int> counts(static_cast<std::size_t>(p),
                                        static_cast<int>(elements / p));
          MPI_Reduce_scatter(send.data(), part.output, counts.data(), element_type(e), MPI_SUM, c);
        }
        if (!options_.check) break;
        const int64_t first = all ? 0 : me * (part.output_bytes / e);  // element of the input
        for (int64_t k = 0; k < part.output_bytes / e; ++k) {
          uint64_t sum = 0;
          for (int q = 0; q < p; ++q) sum += value(q, first + k);
          if (sum != load(part.output + k * e, e))
            fail(op, buffer, part.output - buffer.data + k * e,
                 "the reduction is not the sum over the group");
        }
        break;
      }
      case OpKind::send_recv: {
        fill(part.input, chunk, me, 0);
        const int next = (me + 1) % p, prev = (me + p - 1) % p;
        MPI_Sendrecv(part.input, static_cast<int>(chunk), MPI_BYTE, next, 0, part.output,
                     static_cast<int>(chunk), MPI_BYTE, prev, 0, c, MPI_STATUS_IGNORE);
        if (!options_.check) break;
        for (int64_t j = 0; j < chunk; ++j) {
          if (part.output[j] != pattern(prev, j))
            fail(op, buffer, chunk + j,
                 fmt::format("is not the chunk of the previous rank {}", prev));
        }
        break;
      }
      default: {  // all_to_all: block q of the send buffer goes to rank q
        const int64_t block = part.input_bytes / p;
        // A MoE layer's all-to-alls come in pairs on one ep buffer: the dispatch, then the
        // combine. The combine sends back what the dispatch delivered (the experts taken as
        // the identity), so each rank must get its own dispatched tokens back, each in the
        // slot it left from.
        const auto pending = dispatched_.find(buffer.buffer->id);
        const bool combine =
            buffer.buffer->role == BufferRole::ep_buffer && pending != dispatched_.end();
        if (combine) {
          std::memcpy(part.input, pending->second.received.data(),
                      static_cast<std::size_t>(part.input_bytes));
        } else {
          fill(part.input, part.input_bytes, me, 0);
        }
        MPI_Alltoall(part.input, static_cast<int>(block), MPI_BYTE, part.output,
                     static_cast<int>(block), MPI_BYTE, c);
        if (combine) {
          const int64_t dispatch = pending->second.op;
          dispatched_.erase(pending);
          if (!options_.check) break;
          for (int64_t j = 0; j < block * p; ++j) {
            if (part.output[j] != activation_byte(me, dispatch, j))
              fail(op, buffer, part.input_bytes + j,
                   fmt::format("the combine did not bring back the token byte this rank "
                               "dispatched from there (block {})",
                               j / block));
          }
          break;
        }
        if (buffer.buffer->role == BufferRole::ep_buffer) {
          dispatched_[buffer.buffer->id] = {
              op.id, std::vector<std::byte>(part.output, part.output + block * p)};
        }
        if (!options_.check) break;
        for (int64_t j = 0; j < block * p; ++j) {
          const int q = static_cast<int>(j / block);
          if (part.output[j] != pattern(q, me * block + j % block))
            fail(op, buffer, part.input_bytes + j,
                 fmt::format("is not rank {}'s block for this rank", q));
        }
        break;
      }
    }
  }

  ReplayOptions options_;
  int rank_ = 0, size_ = 1, step_ = 0;
  const Plan* plan_ = nullptr;
  std::vector<MPI_Comm> comms_;                    // one per plan process group
  std::unordered_map<int64_t, uint64_t> written_;  // transient buffer -> fingerprint
  // no_sync: the last micro-batch each accumulator took gradients from, this step.
  std::unordered_map<int64_t, int64_t> accumulated_through_;
  struct HostCopy {
    std::vector<std::byte> bytes;
    uint64_t fingerprint = 0;  // of the activations when their forward wrote them
  };
  std::map<std::pair<int64_t, int64_t>, HostCopy> host_;  // (unit, micro-batch) -> offloaded
  // MoE dispatch all-to-alls awaiting their combine, by ep buffer: the op and what it
  // delivered.
  struct Dispatched {
    int64_t op = -1;
    std::vector<std::byte> received;
  };
  std::unordered_map<int64_t, Dispatched> dispatched_;
  std::vector<BufferSpan> persistent_;
  float sink_ = 0;
};

}  // namespace

GemmShape cpu_reduced_gemm(const GemmShape& shape, double compute_scale) {
  const double shrink = std::cbrt(compute_scale);
  auto dim = [&](int64_t d) {
    return static_cast<int64_t>(std::max(1.0, std::round(static_cast<double>(d) * shrink)));
  };
  return {.m = dim(shape.m), .n = dim(shape.n), .k = dim(shape.k)};
}

std::unique_ptr<ExecutorBackend> make_cpu_backend(const ReplayOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace shardplan
