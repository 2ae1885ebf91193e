#pragma once

// The C interface between the executor and the CUDA plugin (executor/cuda_plugin.cc),
// kept to plain types so the plugin can be loaded with dlopen.
extern "C" {

struct ShardplanCudaProbeResult {
  int runtime_version;
  int nccl_version;
  int cublas_version;
  int device_count;
  char device_error[256];
};

// Fills `result`; returns 0.
int shardplan_cuda_probe(ShardplanCudaProbeResult* result);

// The replay. Every call returns 0 or writes a message to `error` (ShardplanCudaError)
// and returns non-zero. A context holds the device, one stream per plan stream, cuBLAS,
// one NCCL communicator per group, and per-op start/end events.
struct ShardplanCudaError {
  char message[512];
};

enum ShardplanCudaOpKind {
  kCudaCompute = 0,
  kCudaOptimizer = 1,
  kCudaAllGather = 2,
  kCudaReduceScatter = 3,
  kCudaAllReduce = 4,
  kCudaSendRecv =
      5,  // send `input` to the next rank of the group, receive `output` from the previous
  kCudaAllToAll = 6,  // `count` elements to and from every rank of the group
  kCudaCopy = 7       // `count` bytes from `input` to `output` (activation offload: device
                      // to pinned host memory, or back)
};

// One CUDA stream per plan stream (planner/plan.h Stream: compute, ag, rs, outer, tp, cp,
// d2h, h2d).
enum { kCudaStreams = 8 };

struct ShardplanCudaOp {
  int kind;      // ShardplanCudaOpKind
  int stream;    // 0 compute, 1 ag, 2 rs, 3 outer, 4 tp, 5 cp, 6 d2h, 7 h2d
  int group;     // the plan's process group (collectives)
  long long id;  // plan op id
  const long long* deps;
  int num_deps;
  const char* name;  // NVTX range
  // Compute: the op's matmuls as (M, N, K) triples (bf16 cuBLAS GEMMs of those shapes),
  // its attention FLOPs (one square bf16 GEMM of as many FLOPs) and its memory-bound
  // traffic (a device copy moving as many bytes). No shapes: one square GEMM of gemm_flops.
  const long long* gemms;
  int num_gemms;
  double gemm_flops;
  double attention_flops;
  long long memory_bytes;
  // Collective and optimizer operands: `count` elements of `element_bytes` each.
  void* input;
  void* output;
  long long count;
  int element_bytes;
  int part;   // an op may take several calls (one per parameter group): the first
  int parts;  // records its start, the last its end
  // PyTorch FSDP's casting copy-ins, before the collective: an all-gather's fp32 shard into
  // `input` (this rank's slice of `output`), a reduce-scatter's bf16 gradients into its
  // fp32 `input`. The replay checks no values on the GPU: `cast_bytes` of `cast_source` are
  // copied to `input` as the cast kernel's stand-in. 0: none.
  const void* cast_source;
  long long cast_bytes;
};

// This rank's place in one of the plan's process groups. The plugin makes one NCCL
// communicator over the world (from `world_id`, the ncclUniqueId that rank 0 made with
// shardplan_cuda_unique_id and broadcast by MPI) and splits it per group with
// ncclCommSplit: `color` names this rank's instance of the group (ranks of one instance
// share it), `rank` is its place there. Every rank takes part in every split, so the
// groups array must be the same length and order on all ranks. A group of one rank, or
// one no collective uses (ranks 1), gets no communicator.
struct ShardplanCudaGroup {
  int ranks;
  int rank;
  int color;
};

int shardplan_cuda_unique_id(void* id128, ShardplanCudaError* error);
// `world_id`: 128 bytes; ignored when world_ranks is 1.
int shardplan_cuda_open(int device, int world_ranks, int world_rank, const void* world_id,
                        int num_ops, int num_groups, const ShardplanCudaGroup* groups,
                        void** context, ShardplanCudaError* error);
int shardplan_cuda_alloc(void* context, long long bytes, void** data, ShardplanCudaError* error);
// Pinned host memory (cudaMallocHost), freed with the context: where offloaded
// activations wait for their backward.
int shardplan_cuda_host_alloc(void* context, long long bytes, void** data,
                              ShardplanCudaError* error);
int shardplan_cuda_begin_step(void* context, ShardplanCudaError* error);
int shardplan_cuda_run(void* context, const ShardplanCudaOp* op, ShardplanCudaError* error);
// Waits for the step; `start`/`end` (num_ops each) get seconds from the step's start;
// ops not run this step get -1.
int shardplan_cuda_end_step(void* context, double* start, double* end, ShardplanCudaError* error);
int shardplan_cuda_memory(void* context, long long* free_bytes, long long* total_bytes,
                          ShardplanCudaError* error);
void shardplan_cuda_close(void* context);
}

namespace shardplan {
inline constexpr const char* kCudaPluginFile = "libshardplan_cuda.so";
inline constexpr const char* kCudaProbeSymbol = "shardplan_cuda_probe";
}  // namespace shardplan
