#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "planner/plan.h"
#include "traces/timeline.h"

namespace shardplan {

struct ReplayOptions {
  int warmup = 1;  // steps run before timing
  int steps = 2;   // steps timed
  // CPU backend: compute ops run their matmuls shrunk to this fraction of the FLOPs (real
  // sizes would take hours on a CPU).
  double compute_scale = 1e-6;
  bool check = true;  // integrity checks on real data (CPU backend)
  // The job ends (Watchdog) when this rank makes no progress for this long: PyTorch's
  // default NCCL process-group timeout, 10 minutes (c10d ProcessGroupNCCL.hpp,
  // kProcessGroupNCCLDefaultTimeout).
  double timeout_seconds = 600;
};

// A check on real data failed: names the op, the buffer and the byte offset.
class IntegrityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A placed buffer: its bytes on this rank (a persistent allocation, or the pool at the
// buffer's planned offset).
struct BufferSpan {
  std::byte* data = nullptr;
  int64_t bytes = 0;
  const PlanBuffer* buffer = nullptr;
};

// How a collective lies in its planned buffers, one part per parameter group (so both
// backends read the plan the same way). Not in place: an all-gather copies this rank's
// shard (`input`) into the group's gathered region (`output`, ranks × the shard); a
// reduction reads the group's region of the unsharded gradient (`input`, ranks × the
// output) into the written shard (`output`). In place (ZeRO-1/2's gather after the step,
// HSDP's outer collectives, all-reduces, ZeRO-1's reduce-scatter): `input` and `output`
// are the written buffer, each rank owning an equal region of it. A casting all-gather
// (PyTorch FSDP: an fp32 shard gathered as bf16 or FP8) has `cast_from` > `cast_to`: the
// backend casts `input` (the shard, cast_from bytes per element) into this rank's slice
// of `output` (output_bytes ÷ ranks) and gathers in place there, as FSDP2's copy-in does.
// The CPU replay's cast keeps each element's top cast_to bytes (bf16 is fp32's top half),
// and checks them; the CUDA replay, which checks no values, copies the slice's bytes.
// A reduce-scatter with a copy-in (PyTorch FSDP's foreach_reduce: bf16 gradients widened
// into an fp32 input, or no_sync's accumulator copied as it is) has `cast_source` (the
// gradients, cast_from bytes each) and `input` (the region it writes first, cast_to bytes
// each): widening puts each element's bytes on top, zeros below.
struct CollectivePart {
  BufferSpan target;  // the written buffer
  BufferSpan source;  // the read buffer the input comes from (the target in place)
  std::byte* input = nullptr;
  int64_t input_bytes = 0;
  std::byte* output = nullptr;
  int64_t output_bytes = 0;
  bool in_place = false;
  int cast_from = 0;  // element bytes of `input` when the gather casts; 0: no cast
  int cast_to = 0;    // element bytes of `output` when the gather casts
  const std::byte* cast_source = nullptr;  // a casting reduce-scatter's gradients
  // A reduce-scatter from a transient input: the element size it reduces in (4 when FSDP2
  // reduces fp32 into bf16 gradients, which then take each result's top bytes); 0: the
  // target's.
  int input_element_bytes = 0;
};
// Each `from`-byte element of `in` (`in_bytes`) as a `to`-byte one into `out`: narrowing
// keeps its top `to` bytes, widening puts its bytes on top of zeros.
void cast_elements(const std::byte* in, int64_t in_bytes, int from, int to, std::byte* out);
std::vector<CollectivePart> collective_parts(const Plan& plan, const PlanOp& op,
                                             const std::vector<BufferSpan>& reads,
                                             const std::vector<BufferSpan>& writes);

// A tensor-, context- or expert-parallel collective: it writes one tp_buffer, cp_buffer or
// ep_buffer (a MoE layer's dispatch and combine), where
// its data lies as NCCL's in-place conventions put it. This rank is at `position` in the
// op's group of `ranks`; `bytes` is the op's size rounded down to whole elements per rank.
// all_gather: input = the rank's chunk of the gathered output at the buffer's start;
// reduce_scatter: input = the buffer's first `bytes`, output = the rank's chunk of it;
// all_reduce: both the buffer's first `bytes`; send_recv and all_to_all: input the first
// `bytes`, output the next `bytes` (received from the previous rank; from every rank).
bool is_model_parallel(const PlanOp& op, const std::vector<BufferSpan>& writes);
CollectivePart model_parallel_part(const PlanOp& op, const BufferSpan& buffer, int64_t position,
                                   int64_t ranks, int64_t element_bytes);

// What a device does for the replay engine (STYLE.md §3: CPU and CUDA). The engine owns
// the order; the backend owns memory, the ops and their timing.
class ExecutorBackend {
 public:
  virtual ~ExecutorBackend() = default;
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Called once, before any allocation: groups (dp_shard, dp_outer) from the plan.
  virtual void prepare(const Plan& plan) = 0;
  virtual std::byte* allocate(int64_t bytes) = 0;
  virtual void release(std::byte* data) = 0;
  // Fills persistent buffers with their initial data.
  virtual void initialise(const std::vector<BufferSpan>& persistent) = 0;
  virtual void run(const PlanOp& op, const std::vector<BufferSpan>& reads,
                   const std::vector<BufferSpan>& writes) = 0;
  // A step begins (the backend may reset per-step state).
  virtual void begin_step(int step) = 0;
  virtual double now() = 0;  // seconds
  // The slowest rank's value of `seconds` (a collective).
  virtual double max_over_ranks(double seconds) = 0;
  // Backends that run ops asynchronously (CUDA) time them on the device: after a step's
  // ops are issued, end_step waits and fills each op's start and end (seconds from the
  // step's start). Others are timed by the engine around run().
  virtual bool device_timed() const { return false; }
  virtual void end_step(std::vector<double>& start, std::vector<double>& end) {
    (void)start;
    (void)end;
  }
  // Device memory in use after setup (0 when the backend cannot tell).
  virtual int64_t device_memory_used() { return 0; }
  // Refuses (InputError) a valid plan this backend cannot run within its own limits (the
  // CPU backend's work per step, MPI's int counts). Decided from the plan and options
  // alone, so every rank decides alike.
  virtual void check_plan(const Plan& plan) const { (void)plan; }
};

// What replay checks first, the same on every rank: the plan is valid, the world is as
// large as the plan, and the backend can run it. InputError otherwise.
void check_replayable(const Plan& plan, const ExecutorBackend& backend);

// What a rank that stopped making progress was running at `step` (-1: setup) and `op`
// (kSetupCommunicators, kSetupBuffers or -1 at a step's start or end; else the op), and
// who can be at fault: another rank, for a collective; this rank alone, for its own
// compute. The watchdog's message (watchdog.h).
inline constexpr int64_t kSetupCommunicators = -1;
inline constexpr int64_t kSetupBuffers = -2;
std::string describe_stall(const Plan& plan, int step, int64_t op);

// Validates the plan, allocates the pool once at its planned size and every persistent
// buffer (memory this rank cannot get is an InputError naming the buffer), then runs
// warmup + timed steps under a Watchdog: ops in an order that respects every dependency
// and each stream's order, communication streams first whenever they may run (as a GPU's
// would), so a missing dependency shows as a read before a write. Returns a measured
// Timeline: this rank's op times in the last timed step, and the step time averaged over
// the timed steps, each the slowest rank's.
Timeline replay(const Plan& plan, ExecutorBackend& backend, const ReplayOptions& options);

// The order replay runs ops in (exposed for tests).
std::vector<int64_t> replay_order(const Plan& plan);

}  // namespace shardplan
