#include "executor/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "executor/watchdog.h"
#include "models/error.h"
#include "planner/plan_validator.h"

namespace shardplan {

std::vector<CollectivePart> collective_parts(const Plan& plan, const PlanOp& op,
                                             const std::vector<BufferSpan>& reads,
                                             const std::vector<BufferSpan>& writes) {
  const int64_t p = std::max<int64_t>(op_group_size(plan, op), 1);
  std::vector<CollectivePart> parts;
  auto in_place = [&](const BufferSpan& w) {
    parts.push_back({.target = w,
                     .source = w,
                     .input = w.data,
                     .input_bytes = w.bytes,
                     .output = w.data,
                     .output_bytes = w.bytes,
                     .in_place = true});
  };
  if (op.kind == OpKind::all_gather) {
    // PyTorch FSDP gathers its fp32 shards as param_dtype (or FP8): the unsharded buffer
    // has fewer bytes per element than the shards.
    const int to = writes.size() == 1 ? static_cast<int>(dtype_bytes(writes[0].buffer->dtype)) : 0;
    auto gathered_bytes = [&](const BufferSpan& r) {
      const auto from = dtype_bytes(r.buffer->dtype);
      return from > to && to > 0 ? r.bytes / from * to * p : r.bytes * p;
    };
    int64_t gathered = 0;
    for (const BufferSpan& r : reads)
      if (r.buffer->role == BufferRole::model_weight) gathered += gathered_bytes(r);
    if (writes.size() == 1 && !writes[0].buffer->persistent && gathered == writes[0].bytes) {
      // ZeRO-3: every group's shard, in group order, into the unsharded buffer.
      int64_t offset = 0;
      for (const BufferSpan& r : reads) {
        if (r.buffer->role != BufferRole::model_weight) continue;
        const auto from = static_cast<int>(dtype_bytes(r.buffer->dtype));
        const bool cast = from > to;
        parts.push_back({.target = writes[0],
                         .source = r,
                         .input = r.data,
                         .input_bytes = r.bytes,
                         .output = writes[0].data + offset,
                         .output_bytes = gathered_bytes(r),
                         .cast_from = cast ? from : 0,
                         .cast_to = cast ? to : 0});
        offset += gathered_bytes(r);
      }
    } else {
      for (const BufferSpan& w : writes)
        if (w.buffer->role == BufferRole::model_weight) in_place(w);
    }
    return parts;
  }
  // PyTorch FSDP's reduce-scatter copy-in: the op first casts the backward's gradients
  // (its read, param_dtype) into a reduce_dtype input it writes (role unsharded_grad).
  const BufferSpan* staged = nullptr;
  std::vector<BufferSpan> targets;
  for (const BufferSpan& w : writes) {
    if (op.kind == OpKind::reduce_scatter && w.buffer->role == BufferRole::unsharded_grad) {
      staged = &w;
    } else {
      targets.push_back(w);
    }
  }
  // Counted in elements: the reduction may run in a wider dtype than the gradients it
  // lands in (FSDP2 reduces in fp32 and casts the shard to bf16 master weights' dtype).
  int64_t total_out = 0;
  for (const BufferSpan& w : targets) total_out += w.bytes / dtype_bytes(w.buffer->dtype);
  const BufferSpan* input = staged != nullptr ? staged : reads.empty() ? nullptr : &reads[0];
  const bool from_transient = op.kind == OpKind::reduce_scatter && reads.size() == 1 &&
                              !input->buffer->persistent &&
                              input->bytes / dtype_bytes(input->buffer->dtype) == total_out * p;
  const int from = reads.empty() ? 0 : static_cast<int>(dtype_bytes(reads[0].buffer->dtype));
  const int to = input == nullptr ? 0 : static_cast<int>(dtype_bytes(input->buffer->dtype));
  // The copy-in runs whether or not it changes the dtype (no_sync's accumulated gradients
  // are already in reduce_dtype).
  const bool cast = from_transient && staged != nullptr;
  int64_t offset = 0;
  for (const BufferSpan& w : targets) {
    if (!from_transient) {
      in_place(w);
      continue;
    }
    const int64_t input_bytes = w.bytes / dtype_bytes(w.buffer->dtype) * to * p;
    parts.push_back({.target = w,
                     .source = reads[0],
                     .input = input->data + offset,
                     .input_bytes = input_bytes,
                     .output = w.data,
                     .output_bytes = w.bytes,
                     .cast_from = cast ? from : 0,
                     .cast_to = cast ? to : 0,
                     .cast_source = cast ? reads[0].data + offset / to * from : nullptr,
                     .input_element_bytes = to});
    offset += input_bytes;
  }
  return parts;
}

void cast_elements(const std::byte* in, int64_t in_bytes, int from, int to, std::byte* out) {
  for (int64_t i = 0, o = 0; i + from <= in_bytes; i += from, o += to) {
    if (to <= from) {
      std::memcpy(out + o, in + i + (from - to), static_cast<std::size_t>(to));
    } else {  // the element's bytes on top, zeros below: bf16 to fp32 exactly
      std::memset(out + o, 0, static_cast<std::size_t>(to - from));
      std::memcpy(out + o + (to - from), in + i, static_cast<std::size_t>(from));
    }
  }
}

bool is_model_parallel(const PlanOp& op, const std::vector<BufferSpan>& writes) {
  return is_collective(op.kind) && writes.size() == 1 && is_comm_buffer(writes[0].buffer->role);
}

CollectivePart model_parallel_part(const PlanOp& op, const BufferSpan& buffer, int64_t position,
                                   int64_t ranks, int64_t element_bytes) {
  const int64_t unit = std::max<int64_t>(ranks, 1) * element_bytes;
  const int64_t bytes = std::min(static_cast<int64_t>(op.bytes), buffer.bytes) / unit * unit;
  const int64_t chunk = bytes / std::max<int64_t>(ranks, 1);
  CollectivePart part{.target = buffer, .source = buffer, .in_place = true};
  switch (op.kind) {
    case OpKind::all_gather:
      part.input = buffer.data + position * chunk;
      part.input_bytes = chunk;
      part.output = buffer.data;
      part.output_bytes = bytes;
      break;
    case OpKind::reduce_scatter:
      part.input = buffer.data;
      part.input_bytes = bytes;
      part.output = buffer.data + position * chunk;
      part.output_bytes = chunk;
      break;
    case OpKind::all_reduce:
      part.input = part.output = buffer.data;
      part.input_bytes = part.output_bytes = bytes;
      break;
    default:  // send_recv, all_to_all: the buffer holds 2 × the op's bytes
      part.input = buffer.data;
      part.input_bytes = std::min(bytes, buffer.bytes / 2 / unit * unit);
      part.output = buffer.data + part.input_bytes;
      part.output_bytes = part.input_bytes;
      part.in_place = false;
      break;
  }
  return part;
}

std::vector<int64_t> replay_order(const Plan& plan) {
  const auto n = plan.ops.size();
  std::vector<std::vector<int64_t>> streams(kNumStreams);
  for (const PlanOp& op : plan.ops) streams[static_cast<std::size_t>(op.stream)].push_back(op.id);
  std::vector<std::size_t> head(kNumStreams, 0);
  std::vector<bool> done(n, false);
  std::vector<int64_t> order;
  order.reserve(n);
  // Communication streams first, then compute: each picks its head when its deps are done.
  const std::array<Stream, kNumStreams> preference = {Stream::ag,  Stream::rs,     Stream::outer,
                                                      Stream::tp,  Stream::cp,     Stream::d2h,
                                                      Stream::h2d, Stream::compute};
  while (order.size() < n) {
    bool progressed = false;
    for (Stream s : preference) {
      auto& list = streams[static_cast<std::size_t>(s)];
      std::size_t& h = head[static_cast<std::size_t>(s)];
      if (h >= list.size()) continue;
      const PlanOp& op = plan.ops[static_cast<std::size_t>(list[h])];
      const bool ready = std::all_of(op.deps.begin(), op.deps.end(),
                                     [&](int64_t d) { return done[static_cast<std::size_t>(d)]; });
      if (!ready) continue;
      order.push_back(op.id);
      done[static_cast<std::size_t>(op.id)] = true;
      ++h;
      progressed = true;
      break;
    }
    if (!progressed) throw std::logic_error("replay: no op can run (a dependency cycle)");
  }
  return order;
}

void check_replayable(const Plan& plan, const ExecutorBackend& backend) {
  if (auto error = validate_plan(plan)) {
    throw InputError("plan", std::string(plan_error_kind_name(error->kind)),
                     "refusing an invalid plan: " + error->message);
  }
  if (backend.world_size() != plan.num_gpus) {
    throw InputError("plan", "num_gpus",
                     fmt::format("the plan is for {} GPUs but {} ranks were started (mpirun -np "
                                 "{})",
                                 plan.num_gpus, backend.world_size(), plan.num_gpus));
  }
  backend.check_plan(plan);
}

std::string describe_stall(const Plan& plan, int step, int64_t op) {
  constexpr std::string_view kOtherRank =
      "another rank died or hangs, or the ranks disagree on a collective";
  if (step < 0) {
    return op == kSetupBuffers
               ? "setup, allocating and filling this rank's buffers (this rank's own work: "
                 "its memory is slow or swapping)"
               : fmt::format(
                     "setup, splitting the plan's process groups into communicators (a "
                     "collective over every rank): {}",
                     kOtherRank);
  }
  if (op < 0 || op >= static_cast<int64_t>(plan.ops.size())) {
    return fmt::format(
        "step {}'s start or end (the step time's maximum over every rank, a collective): {}", step,
        kOtherRank);
  }
  const PlanOp& o = plan.ops[static_cast<std::size_t>(op)];
  if (is_collective(o.kind)) {
    const ProcessGroup& g = plan.process_groups[static_cast<std::size_t>(o.group)];
    return fmt::format("step {}, op {} '{}' (a collective over '{}', {} ranks): {}", step, op,
                       o.name, g.name, g.size, kOtherRank);
  }
  return fmt::format(
      "step {}, op {} '{}' (this rank's own {} op, which no other rank takes part in: the op "
      "itself ran past the limit; a smaller --compute-scale shortens compute ops)",
      step, op, o.name, op_kind_name(o.kind));
}

Timeline replay(const Plan& plan, ExecutorBackend& backend, const ReplayOptions& options) {
  check_replayable(plan, backend);
  // From here on every rank depends on the others: a missing one must end the job, and a
  // rank whose own work runs past the limit says so (describe_stall).
  Watchdog watchdog(options.timeout_seconds,
                    fmt::format("rank {} of {}", backend.rank(), backend.world_size()),
                    [&plan](int step, int64_t op) { return describe_stall(plan, step, op); });
  watchdog.progress(-1, kSetupCommunicators);
  backend.prepare(plan);
  // The pool once at its planned size; persistent buffers one by one. Released on every
  // path out, errors included.
  std::vector<std::byte*> owned;
  struct Release {
    ExecutorBackend& backend;
    std::vector<std::byte*>& owned;
    ~Release() {
      for (std::byte* p : owned) backend.release(p);
    }
  } release{backend, owned};
  auto allocate = [&](int64_t bytes, const std::string& what) {
    try {
      owned.push_back(backend.allocate(std::max<int64_t>(bytes, 1)));
    } catch (const std::bad_alloc&) {
      throw InputError("plan", what,
                       fmt::format("rank {} cannot allocate {} bytes", backend.rank(), bytes));
    }
    return owned.back();
  };
  watchdog.progress(-1, kSetupBuffers);
  std::byte* pool = allocate(plan.pool.size_bytes, "/pool/size_bytes");
  std::vector<BufferSpan> spans(plan.buffers.size());
  std::vector<BufferSpan> persistent;
  for (const PlanBuffer& b : plan.buffers) {
    BufferSpan& s = spans[static_cast<std::size_t>(b.id)];
    s.buffer = &b;
    s.bytes = b.bytes;
    if (b.persistent) {
      s.data = allocate(b.bytes, fmt::format("/buffers/{}/bytes", b.id));
      persistent.push_back(s);
    } else {
      s.data = pool + b.offset;
    }
  }
  backend.initialise(persistent);
  const std::vector<int64_t> order = replay_order(plan);
  std::vector<double> start(plan.ops.size()), end(plan.ops.size());
  double step_seconds = 0, timed_total = 0;
  std::vector<BufferSpan> reads, writes;
  for (int step = 0; step < options.warmup + options.steps; ++step) {
    watchdog.progress(step, -1);
    backend.begin_step(step);
    const double t0 = backend.now();
    for (int64_t id : order) {
      const PlanOp& op = plan.ops[static_cast<std::size_t>(id)];
      reads.clear();
      writes.clear();
      for (int64_t b : op.reads) reads.push_back(spans[static_cast<std::size_t>(b)]);
      for (int64_t b : op.writes) writes.push_back(spans[static_cast<std::size_t>(b)]);
      watchdog.progress(step, id);
      start[static_cast<std::size_t>(id)] = backend.now() - t0;
      backend.run(op, reads, writes);
      end[static_cast<std::size_t>(id)] = backend.now() - t0;
    }
    watchdog.progress(step, -1);
    if (backend.device_timed()) {
      backend.end_step(start, end);
      step_seconds = backend.max_over_ranks(*std::max_element(end.begin(), end.end()));
    } else {
      step_seconds = backend.max_over_ranks(backend.now() - t0);
    }
    if (step >= options.warmup) timed_total += step_seconds;
  }
  // The step time is the mean over the timed steps; op times are the last step's.
  step_seconds = timed_total / std::max(options.steps, 1);
  Timeline t = plan_timeline(plan, "measured", "pool", start, end);
  int64_t held = plan.pool.size_bytes;
  for (const PlanBuffer& b : plan.buffers) held += b.persistent ? b.bytes : 0;
  // What the device reports in use (context, NCCL and cuBLAS workspaces included).
  held = std::max(held, backend.device_memory_used());
  t.memory = {{0, held, held}, {step_seconds, held, held}};
  t.summary.step_seconds = step_seconds;
  summarize_streams(t);
  t.summary.tokens_per_second_per_gpu =
      step_seconds > 0 ? static_cast<double>(plan.tokens_per_gpu) / step_seconds : 0;
  t.summary.peak_allocated_bytes = held;
  t.summary.peak_reserved_bytes = held;
  t.summary.capacity_bytes = plan.capacity_bytes;
  t.summary.fits = held <= plan.capacity_bytes;
  return t;
}

}  // namespace shardplan
