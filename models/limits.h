#pragma once

#include <cstdint>

// Bounds on what shardplan accepts. Each lies far above any real training job, so no real
// input is refused, and far below where int64 byte counts overflow or a plan outgrows a
// machine's memory, so no accepted input gives a crash or a nonsense answer. Each check
// names the field and the bound (docs/formats.md, "Limits").
namespace shardplan::limits {

// GPUs in one job: about 5x the largest single training clusters built so far (xAI's
// Colossus, 200 000 GPUs in 2025; Meta's Llama 3 runs used 16 384 H100s, Dubey et al. 2024).
inline constexpr int64_t kMaxGpus = int64_t{1} << 20;
// GPUs in one node (one NVLink domain): GB200 NVL72 has 72, NVIDIA's announced Rubin
// Ultra NVL576 has 576.
inline constexpr int64_t kMaxGpusPerNode = 1024;

// Parameters of one model: about 70x Switch-C's 1.6 T (Fedus et al. 2021), the largest
// published; 16 bytes per parameter of ZeRO state then stays below 2^51.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 47;

// Tokens in one micro-batch (micro_batch × seq_len): 16x the longest published training
// contexts (1 M tokens: Liu et al., "World Model on Million-Length Video and Language",
// 2024). Activation bytes per GPU then stay below 2^56 for any accepted model.
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 24;

// Micro-batches per optimizer step.
inline constexpr int64_t kMaxGradAccum = int64_t{1} << 20;

// FSDP units × micro-batches: the plan holds about 5 ops and 4 buffers per unit per
// micro-batch, and a plan with its simulation costs about 9 KB per unit per micro-batch
// (measured: Llama 3 8B, 33 units, grad_accum 10 000 = 2.85 GB and 18 s). 200 000 keeps any
// command under about 2 GB and 10 s; real steps need far fewer (Llama 3 8B with 8 192
// tokens per micro-batch and a 16 M-token batch on 8 GPUs: 33 × 256).
inline constexpr int64_t kMaxUnitMicroBatches = 200'000;

// One GPU's memory: at least 1 GiB, at most 16 TiB (B300 and MI355X have 288 GB, NVIDIA's
// announced Rubin Ultra 1 TB). A cluster's gpu.hbm_bytes, a plan's capacity and all one
// rank of a plan holds, a profiler trace's byte counts.
inline constexpr int64_t kMinGpuMemoryBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxGpuMemoryBytes = int64_t{1} << 44;

// Bytes of one pool, buffer or capacity: offsets and their sums stay inside int64.
inline constexpr int64_t kMaxPoolBytes = int64_t{1} << 62;
// Offset alignment: 1 GiB, far above any allocator's (CUDA's is 256 B; huge pages 2 MiB).
inline constexpr int64_t kMaxAlignmentBytes = int64_t{1} << 30;
// Times of a buffer table (MiniMalloc CSV): non-negative and below 2^62, so lengths and
// their differences stay inside int64.
inline constexpr int64_t kMaxPoolTime = int64_t{1} << 62;

// Bytes of one input file (model, cluster, config, space, trace step, CSV, launch script,
// log): far above any real one (a zoo model file has a few kB, an nccl-tests log a few
// hundred kB). A parsed JSON document takes about 6x its text (measured on a 106 MB plan:
// 630 MB resident), so a file at the limit stays under 2 GB. Plans and timelines have
// their own limit below; profiler traces stream and have theirs (traces/).
inline constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;
// Bytes of a plan.json or timeline.json: the largest plan the limits above allow is about
// 650 MB of JSON (measured: Llama 3 8B, 33 units × 1 000 micro-batches, 106 MB).
inline constexpr int64_t kMaxPlanFileBytes = int64_t{1} << 30;

// Wall-clock budgets (pack --time-limit): a week.
inline constexpr double kMaxTimeLimitSeconds = 7 * 24 * 3600.0;

}  // namespace shardplan::limits
