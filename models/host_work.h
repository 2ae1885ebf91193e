#pragma once

#include "models/module_cost.h"

namespace shardplan {

// The CPU time an eager training step spends issuing a module's kernels, on the
// reference host (the Xeon Platinum 8480C of a DGX H100; a cluster's host_cpu.time_scale
// scales it to its own CPU). docs/model.md "Host time"; the counts and rates behind it
// are in docs/research/host_overhead.md.
//
// One Python-dispatched op (an aten op or a Transformer Engine call reached from a
// module's forward, with its launch): PyTorch's Linear forward, one cuBLAS GEMM, takes
// 13.48 µs of CPU time on a DGX H100 (NVIDIA/TransformerEngine#2053, BF16, hidden 2048,
// 8192 tokens). A launch from a C++ loop (Transformer Engine's grouped GEMM issuing one
// cuBLAS GEMM per local expert): 5 µs, the low end of "between 5-20 microseconds" for a
// launch on the CPU side (HolisticTraceAnalysis docs, cuda_kernel_launch_stats).
inline constexpr double kHostOpSeconds = 13.48e-6;
inline constexpr double kHostLaunchSeconds = 5e-6;
// A CUDA graph's launch, and each kernel node in it: "a graph replay costing ~15 µs fixed
// plus ~0.58 µs per node" (ahrefs/ocannl#488, measured; Megatron-LM PR #6453 measures a
// 0.55 µs dispatch gap inside a graph on GB200).
inline constexpr double kGraphLaunchSeconds = 15e-6;
inline constexpr double kGraphNodeSeconds = 0.58e-6;

struct HostWork {
  double forward_seconds = 0;   // one micro-batch's forward, reference host
  double backward_seconds = 0;  // ... its backward (the autograd engine's thread)
  // Device-to-host synchronisations in the forward: the host waits for the GPU to drain
  // (an MoE dispatcher's split sizes).
  int64_t forward_syncs = 0;
};

// The host work of `module` and its subtree on `shape`'s stack, with the parts Megatron
// captures in CUDA graphs (shape.cuda_graphs) replayed.
HostWork host_work(const Module& module, const BatchShape& shape);

}  // namespace shardplan
