#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster_spec.h"
#include "models/dtype.h"
#include "models/module_cost.h"
#include "planner/fsdp_config.h"
#include "traces/timeline.h"

namespace shardplan {

// plan.json schema version; bump on any incompatible change (docs/formats.md).
inline constexpr int kPlanVersion = 5;

// compute: the default stream; ag, rs, outer: FSDP's gathers, reductions and HSDP's
// outer collectives; tp: tensor-parallel collectives overlapped with the GEMMs
// (tp_comm_overlap); cp: ring attention's send/recv steps. Blocking tensor- and
// context-parallel collectives run on the compute stream.
// d2h, h2d: activation offload's copies to and from host memory (offload_activations).
enum class Stream { compute, ag, rs, outer, tp, cp, d2h, h2d };
inline constexpr int kNumStreams = 8;
enum class OpKind {
  all_gather,
  reduce_scatter,
  all_reduce,
  forward,
  backward,
  recompute,
  optimizer_step,
  send_recv,   // each rank of the group sends to the next and receives from the previous
  all_to_all,  // each rank sends 1/n of its buffer to every rank
  offload,     // a layer's saved activations copied to host memory (forward)
  reload,      // ... and back into a new buffer before its backward
};
enum class BufferRole {
  model_weight,           // param dtype (FP8 with fp8_param_gather), sharded under ZeRO-3
  fp8_columnwise_weight,  // MXFP8's column-wise copy
  fp8_transpose_cache,    // keep_fp8_transpose_cache: transposed FP8 weights kept for backward
  main_weight,            // fp32 master weights
  main_grad,
  optimizer_state,        // Adam: two per group; SGD: one (momentum)
  unsharded_weight,       // all-gather output, live from unshard to reshard
  unsharded_grad,         // reduce-scatter input, live from backward to the drain
  activations,            // saved for backward, one unit and micro-batch
  recompute_activations,  // full recompute: re-created inside the unit's backward
  double_buffer,          // double_buffer: persistent unsharded buffers
  tp_buffer,              // a tensor-parallel collective's output: the gathered sequence
  ep_buffer,              // a MoE layer's dispatched tokens (all-to-all or gather over ep, etp)
  cp_buffer,              // context parallelism's received K/V chunks (or gathered K/V)
  fp8_weight_cache,       // FP8 GEMMs on unsharded bf16 weights: Transformer Engine's cast copies
  workspace,              // held by one compute op while it runs (the cross entropy's logits)
  reloaded_activations,   // offload_activations: a layer's saved activations back from host
  accumulated_grad,       // no_sync: a unit's unsharded gradients summed over micro-batches
};

std::string_view stream_name(Stream s);
std::string_view op_kind_name(OpKind k);
std::string_view buffer_role_name(BufferRole r);
std::optional<Stream> parse_stream(std::string_view text);
std::optional<OpKind> parse_op_kind(std::string_view text);
std::optional<BufferRole> parse_buffer_role(std::string_view text);
std::vector<std::string> stream_names();
std::vector<std::string> op_kind_names();
std::vector<std::string> buffer_role_names();

// A family of communicators over the job's ranks, as a mesh dimension (or a run of
// adjacent dimensions flattened) describes it: `size` ranks, `stride` apart. Rank r
// belongs to the instance holding r, at position (r / stride) % size; with ranks laid out
// innermost-first (dp_shard consecutive, dp_outer dp_shard apart) every mesh dimension is
// one such family. Collectives and shards name their group by index into
// Plan::process_groups, so every consumer splits ranks the way the planner did.
struct ProcessGroup {
  // "tp", "cp", "dp_shard_cp", "dp_outer", "dp" (dp_shard_cp and dp_outer); on an expert
  // mesh "ep", "etp", "ep_etp" (the two flattened) and "edp" (expert data parallel).
  std::string name;
  int64_t size = 1;
  int64_t stride = 1;
};

// Rank `rank`'s position inside its instance of `group` (0 .. size-1).
int64_t group_rank(const ProcessGroup& group, int64_t rank);
// Where a group's members sit: `stride` apart, so a node of `gpus_per_node` consecutive
// ranks holds gpus_per_node / stride of them (at least one, at most the group).
RankLayout group_layout(const ProcessGroup& group, int64_t gpus_per_node);
// Which instance of `group` holds `rank`: equal for exactly the ranks of one instance
// (the color of MPI_Comm_split).
int64_t group_instance(const ProcessGroup& group, int64_t rank);

// One flat buffer's worth of parameters: a unit's parameters of one (dtype,
// requires_grad), split further by bucket_bytes. Padded so it divides into equal shards
// of a multiple of kShardAlignElements elements over the ranks that shard it.
struct ParamGroup {
  int64_t id = 0;
  int64_t unit = 0;
  DType dtype = DType::bf16;
  bool requires_grad = true;
  int64_t elements = 0;                 // parameters in the group
  int64_t padded_elements = 0;          // after padding
  int64_t shard_elements = 0;           // per rank of its sharding group: padded / its ranks
  std::vector<std::string> parameters;  // fully-qualified names, in layout order
  // Routed experts' parameters on an expert mesh (ep > 1 or etp ≠ tp): sharded over the
  // expert-data-parallel group "edp" rather than dp_shard × cp, gathered and reduced on
  // their own (Megatron-FSDP groups parameters by expert or dense, per layer).
  bool expert = false;
};

// Each shard is a multiple of 256 elements, so shards of every dtype (1 to 4 bytes) start
// on 256-byte boundaries (what cudaMalloc and NCCL favour).
inline constexpr int64_t kShardAlignElements = 256;

struct PlanUnit {
  int64_t id = 0;
  std::string name;  // the wrapped module; "" for the root unit
  int64_t parameters = 0;
  std::vector<int64_t> groups;
};

// A contiguous run of traced modules belonging to one unit: a layer, or the root's
// modules before and after the layers.
// A tensor- or context-parallel collective a segment runs on each micro-batch (from its
// modules' ModuleComm), sized for the whole micro-batch as nccl-tests counts it.
struct SegmentComm {
  CommKind kind = CommKind::all_gather;
  MeshAxis axis = MeshAxis::tp;  // runs over the process group of that name (plan.process_groups)
  std::string module;            // the module that runs it
  double bytes = 0;
  int64_t count = 1;  // back-to-back repetitions (ring steps)
};

// The transient buffer a collective of `kind` moving `bytes` needs beside the saved
// activations: an all-gather's output, a reduce-scatter's or all-reduce's full-size input
// (the row-parallel output), ring attention's two K/V chunks (the one attended to while
// the next arrives: Transformer Engine's p2p_comm_buffers), an all-to-all's send and
// receive buffers.
double comm_buffer_bytes(CommKind kind, double bytes);

// The op that runs a model's collective.
OpKind op_kind_of(CommKind kind);

struct PlanSegment {
  int64_t id = 0;
  int64_t unit = 0;
  std::string label;  // module names joined by '+'
  std::vector<std::string> modules;
  double forward_flops = 0;             // one micro-batch
  double backward_flops = 0;            // one micro-batch; with selective recompute, the re-run too
  double forward_attention_flops = 0;   // the part of forward_flops run by attention kernels
  double backward_attention_flops = 0;  // the part of backward_flops run by attention kernels
  double forward_bf16_gemm_flops = 0;   // GEMM FLOPs that stay in BF16 under FP8 (output layer)
  double backward_bf16_gemm_flops = 0;
  double io_bytes = 0;  // activation bytes read + written by memory-bound work (forward)
  // Selective recompute's re-run inside backward (Megatron's recompute_modules): the
  // memory-bound bytes it moves, and the saved bytes it re-creates for the backward.
  double recompute_io_bytes = 0;
  double recompute_bytes = 0;
  double fp8_cast_forward_bytes = 0;   // FP8 casts of the matmul inputs (forward, fp8 only)
  double fp8_cast_backward_bytes = 0;  // ... and of their output gradients (backward)
  std::vector<GemmShape>
      gemms;  // the forward's matmuls (m tokens, n out, k in); backward runs two per
  double activation_bytes = 0;       // saved for backward under the config's recompute
  double full_activation_bytes = 0;  // saved without recompute (re-created under full)
  bool checkpointed = false;         // re-run in backward under full recompute
  double workspace_bytes = 0;        // held by its forward and its backward while they run
  // Model-parallel collectives in execution order: the forward's (re-run by a full
  // recompute), and the backward's (with the selective recompute's re-run first).
  std::vector<SegmentComm> forward_comms;
  std::vector<SegmentComm> backward_comms;
  // CPU time issuing its kernels per micro-batch on the reference host (models/host_work.h),
  // and whether its forward waits for the GPU to drain first (an MoE dispatch's sizes).
  double forward_host_seconds = 0;
  double backward_host_seconds = 0;
  bool host_sync = false;
};

struct PlanBuffer {
  int64_t id = 0;
  BufferRole role = BufferRole::model_weight;
  int64_t unit = -1;         // -1: not tied to a unit
  int64_t group = -1;        // parameter group, -1 for activations
  int64_t micro_batch = -1;  // -1: every micro-batch
  DType dtype = DType::bf16;
  int64_t bytes = 0;
  bool persistent = true;
  // Each rank holds its own slice (at its position in this process group); -1: every
  // rank holds all of it.
  int64_t shard_group = -1;
  // Transient buffers are live over ops [live_begin, live_end) in op order (half-open:
  // a buffer freed at op t and one allocated at t may share bytes).
  int64_t live_begin = 0;
  int64_t live_end = 0;
  int64_t offset = -1;  // byte offset in the pool; -1 for persistent buffers
  std::string name;
};

struct PlanOp {
  int64_t id = 0;
  Stream stream = Stream::compute;
  OpKind kind = OpKind::forward;
  int64_t unit = -1;
  int64_t segment = -1;      // compute ops
  int64_t micro_batch = -1;  // -1: once per step
  std::string name;          // "ag_fwd layers.0 mb0"
  double bytes = 0;  // collectives: message size as nccl-tests counts it; compute: HBM traffic
  double flops = 0;
  double attention_flops = 0;   // the part of `flops` run by attention kernels
  double bf16_gemm_flops = 0;   // the part of `flops` in GEMMs that stay BF16 under FP8
  int64_t group = -1;           // collectives: index into Plan::process_groups; -1 otherwise
  std::vector<int64_t> deps;    // ops that must finish first (ids below this op's)
  std::vector<int64_t> reads;   // buffer ids
  std::vector<int64_t> writes;  // buffer ids
  // The host's part (docs/model.md "Host time"): CPU seconds issuing this op's kernels on
  // the reference host, in op order; host_sync: the host first waits for the compute
  // stream's previous op to end (a device-to-host copy it needs).
  double host_seconds = 0;
  bool host_sync = false;
};

struct PoolPlan {
  std::string algorithm;
  int64_t alignment_bytes = 256;
  int64_t size_bytes = 0;
  int64_t lower_bound_bytes = 0;  // largest total of live transient bytes at any op
};

struct Plan {
  int version = kPlanVersion;
  std::string model;
  std::string cluster;
  int64_t num_gpus = 0;
  int64_t gpus_per_node = 0;
  FsdpConfig config;  // resolved: dp_shard set
  std::vector<ProcessGroup> process_groups;
  std::vector<PlanUnit> units;
  std::vector<ParamGroup> groups;
  std::vector<PlanSegment> segments;
  std::vector<PlanBuffer> buffers;
  std::vector<PlanOp> ops;
  PoolPlan pool;
  int64_t non_tensor_bytes = 0;
  int64_t capacity_bytes = 0;
  // Model FLOPs per GPU per step in the PaLM convention (3× the forward, no causal
  // discount, no recompute): the numerator of MFU.
  double model_flops = 0;
  // Tokens per GPU per step: the job's tokens ÷ its GPUs, micro_batch × seq_len ×
  // grad_accum ÷ (tp × cp) (each tensor- and context-parallel group shares its sequences).
  double tokens_per_gpu = 0;
};

// Whether an op's group (its index into plan.process_groups; -1: none) is tensor, context
// or expert parallel: its time is model-parallel time, not FSDP's.
bool is_model_parallel_group(const Plan& plan, int64_t group);

// The transient buffer role that holds a model-parallel collective on `axis`: one buffer
// per role and pass (tp, cp, and the MoE dispatch's ep, etp and ep_etp together).
BufferRole comm_buffer_role(MeshAxis axis);
bool is_comm_buffer(BufferRole role);

// The matmuls a compute op runs, each as (m, n, k): forward and recompute run every
// forward matmul of the op's segment; backward two per matmul, the input gradient
// (m × k × n: tokens × in ← out) and the weight gradient (n × k × m: out × in ← tokens).
// Empty for ops without a segment.
std::vector<GemmShape> op_gemms(const Plan& plan, const PlanOp& op);

// All-gather, reduce-scatter, all-reduce, send/recv or all-to-all: the ops that run over
// a process group.
bool is_collective(OpKind kind);

// The index of the process group named `name`, or -1.
int64_t find_process_group(const Plan& plan, std::string_view name);

// The ranks of `op`'s group (1 for ops that are not collectives).
int64_t op_group_size(const Plan& plan, const PlanOp& op);

// For every op, the earliest compute-stream op that depends on it, directly or through
// other ops (ops.size() when none does). A buffer used on a communication stream can be
// freed only there: the compute stream is where the program waits, in program order.
std::vector<int64_t> earliest_compute_waiters(const Plan& plan);

// A Timeline of `plan` with every op at `start[id]`..`end[id]` (seconds from the step's
// start); the summary and memory are left to the caller (simulator or executor).
Timeline plan_timeline(const Plan& plan, std::string source, std::string allocator,
                       const std::vector<double>& start, const std::vector<double>& end);

}  // namespace shardplan
