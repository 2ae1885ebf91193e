#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/gemm_rate.h"

namespace shardplan {

// One GPU. Peaks are dense (no structured sparsity); every value's source is in the
// cluster file's "sources".
struct GpuSpec {
  std::string name;
  int64_t hbm_bytes = 0;                          // device memory as CUDA reports its total
  double hbm_bandwidth_bytes_per_s = 0;           // datasheet peak
  double hbm_measured_bandwidth_bytes_per_s = 0;  // STREAM-like measurement, at most the peak
  double bf16_dense_flops = 0;                    // FLOP/s
  double fp8_dense_flops = 0;                     // FLOP/s; 0 without FP8 tensor cores
  int64_t sm_count = 0;
  double tdp_watts = 0;          // board power the datasheet peaks hold at; 0 = not given
  double power_limit_watts = 0;  // the job's limit (nvidia-smi -pl); 0 = the TDP
};

// The share of its tensor-core throughput a GPU sustains under its power limit:
// (limit / TDP)^0.48 below the TDP, 1 otherwise. The exponent is fitted to NVIDIA's
// MLPerf Inference v4.0 DGX-H100 submissions run at full power and again capped per GPU,
// nothing else changed (mlcommons/inference_results_v4.0, DGX-H100_H100-SXM-80GBx8_TRT vs
// _TRT_MaxQ): bert-99.9 at 450 W 0.820, bert-99 at 400 W 0.766, dlrm-v2-99 at 450 W 0.806,
// dlrm-v2-99.9 at 450 W 0.801 of the 700 W throughput (exponents 0.45, 0.48, 0.49, 0.50).
// Memory-bound work is not scaled (docs/model.md "Cluster constants").
double power_limited_compute_share(const GpuSpec& gpu);

// One tier of the network, per GPU and per direction.
struct LinkSpec {
  std::string name;
  double bandwidth_bytes_per_s = 0;               // line rate
  double measured_bus_bandwidth_bytes_per_s = 0;  // nccl-tests busbw on this tier
  double latency_s = 0;                           // per hop
};

// NCCL's algorithms (src/graph/tuning.cc) and protocols; p2p is the send/recv path that
// all-to-all and ring shifts take, which NCCL's tuner does not model.
enum class NcclAlgorithm { ring, tree, nvls, p2p };
enum class NcclProtocol { ll, ll128, simple };
// Where a collective's group sits: inside one NVLink domain, or across domains.
enum class NetworkTier { intra_node, inter_node };

std::string_view nccl_algorithm_name(NcclAlgorithm a);
std::string_view nccl_protocol_name(NcclProtocol p);
std::string_view network_tier_name(NetworkTier t);

// A correction `shardplan calibrate` fitted to measured collectives of one regime (tier,
// algorithm, protocol): the model's latency times latency_scale and its bus bandwidth
// times bandwidth_scale. Scales, not absolute values, so one fit on an 8-rank table holds
// for every group size of that tier. points, r2 and rms_relative_error describe the fit.
struct CollectiveCalibration {
  NetworkTier tier = NetworkTier::intra_node;
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  NcclProtocol protocol = NcclProtocol::simple;
  double latency_scale = 1;
  double bandwidth_scale = 1;
  int64_t points = 0;
  double r2 = 0;
  double rms_relative_error = 0;
};

// Which collective library's tuning constants apply: NCCL's, or RCCL's on AMD GPUs.
enum class CollectiveLibrary { nccl, rccl };

struct NcclSpec {
  CollectiveLibrary library = CollectiveLibrary::nccl;
  double base_latency_s = 0;   // fixed cost of launching a collective
  int64_t collective_sms = 0;  // SMs an NCCL collective kernel occupies (at least 1)
  bool nvls = false;           // NVLink SHARP (in-switch reduction)
  bool ib_sharp = false;       // InfiniBand SHARP
  // The channels NCCL's topology search builds, which size every communicator's buffers
  // (models/nccl_memory.h). Optional in a cluster file; the defaults are an 8 × H100
  // NVSwitch node's, as NCCL logs them (docs/model.md "Device memory").
  int64_t channels = 24;               // collective channels inside one NVLink domain
  int64_t channels_multi_node = 16;    // ... of a communicator that spans domains
  int64_t p2p_channels_per_peer = 32;  // send/recv channels to each NVLink peer
  int64_t nvls_channels = 16;          // NVLS channels (with nvls)
  // NCCL's version as NCCL_VERSION_CODE (major·10000 + minor·100 + patch): before 2.22
  // every communicator connects its ring, tree and NVLS buffers at init, and NVLS's were
  // larger (models/nccl_memory.h). A cluster file's "version": "2.19.3"; default 2.27.
  int64_t version_code = 22700;
};

// The physical ranges of what calibration fits: the cluster reader refuses a file outside
// them and `shardplan calibrate` refuses a fit that lands outside them (naming the
// measurement), so neither can hand the simulator a value that blows up.
namespace cluster_bounds {
// A kernel class's share of the GPU's peak. At 1 % a class runs 100 times slower than the
// datasheet: no class of a training step on a working GPU comes near it (the lowest in
// the zoo and in every fit docs/user-guide.md reports is MI300X's SDPA attention, 0.25),
// and below it nothing bounds the step time (at 1e-309, 1 ÷ efficiency is infinite and
// the simulation never ends). Above 1 a class would beat the datasheet peak.
inline constexpr double kMinEfficiency = 0.01;
inline constexpr double kMaxEfficiency = 1.0;
// Compute overlapping a collective: Lee et al. 2025 (arXiv 2507.03114) measure 18.9 %
// slower on average and 40 % at worst; 4 (five times slower) is ten times the worst.
inline constexpr double kMaxOverlapSlowdown = 4.0;
// A collective regime's latency and bandwidth scales: NCCL's own constants are within a
// few times of every measurement published; 1000 times off is a fit gone wrong or a hand
// edit's slip, not a network.
inline constexpr double kMinCalibrationScale = 1e-3;
inline constexpr double kMaxCalibrationScale = 1e3;
}  // namespace cluster_bounds

// How close kernels get to the GPU's peaks (simulator/compute_model.h): GEMMs and
// attention as fractions of the dense tensor-core peak, memory-bound work (norms,
// activations, the optimizer step) as fractions of the measured HBM bandwidth. Compute
// overlapping a collective runs 1 + overlap_slowdown times longer. Defaults and their
// sources: docs/model.md "Compute".
struct ComputeSpec {
  double gemm_efficiency = 0.70;
  double fp8_gemm_efficiency = 0.65;  // of the FP8 peak (fp8_param_gather runs FP8 GEMMs)
  double attention_efficiency = 0.50;
  // PyTorch's SDPA with its default backend on this GPU (the torch stacks); a cluster file
  // without it uses attention_efficiency.
  double sdpa_attention_efficiency = 0.50;
  double elementwise_efficiency = 0.80;
  double optimizer_efficiency = 0.80;
  double overlap_slowdown = 0.189;
  // Measured GEMM tables of this GPU (models/gemm_rate.h), fitted when the file is read.
  // A GEMM of a precision with a table runs at its shape's rate; without one, at
  // gemm_efficiency / fp8_gemm_efficiency.
  std::vector<GemmTable> gemm_tables;
};

// The table for GEMMs of `precision`, grouped (an MoE layer's experts) or dense; a grouped
// GEMM without a grouped table uses the dense one. nullptr when there is none.
const GemmTable* find_gemm_table(const ComputeSpec& compute, GemmPrecision precision, bool grouped);

// The GPU's link to host memory (PCIe, or NVLink-C2C on Grace parts), per GPU and per
// direction: what activation offload's copies move over.
struct HostLinkSpec {
  std::string name;
  double bandwidth_bytes_per_s = 0;           // line rate
  double measured_bandwidth_bytes_per_s = 0;  // pinned cudaMemcpyAsync, large copies; 0: unknown
};

// The CPU that issues each rank's kernels. time_scale: its CPU time per op against the
// reference host of models/host_work.h (a DGX H100's Xeon Platinum 8480C); a Grace CPU
// takes about 2.75 times as long (NVIDIA/TransformerEngine#2053).
struct HostCpuSpec {
  std::string name = "Intel Xeon Platinum 8480C (reference)";
  double time_scale = 1.0;
};

// Where the ranks of a collective sit: `ranks` in all, `ranks_per_node` of them on each
// node of the NVLink domain (the last node may hold fewer).
struct RankLayout {
  int64_t ranks = 1;
  int64_t ranks_per_node = 1;

  int64_t nodes() const { return (ranks + ranks_per_node - 1) / ranks_per_node; }
};

struct ClusterSpec {
  std::string name;
  std::string description;
  int64_t gpus_per_node = 0;  // GPUs per NVLink domain
  int64_t num_gpus = 0;       // GPUs in this job (set by --nodes or --gpus)
  GpuSpec gpu;
  LinkSpec intra_node;
  LinkSpec inter_node;
  NcclSpec nccl;
  HostLinkSpec host_link;  // optional in a cluster file; needed by offload_activations
  HostCpuSpec host_cpu;    // optional in a cluster file: the reference host
  ComputeSpec compute;
  std::vector<CollectiveCalibration> collective_calibration;  // empty: NCCL's model as is
  int64_t non_tensor_bytes = 0;                // CUDA context, NCCL and cuBLAS workspaces per GPU
  std::map<std::string, std::string> sources;  // dotted field path -> citation

  int64_t nodes() const { return (num_gpus + gpus_per_node - 1) / gpus_per_node; }
  int64_t gpus_in_node() const { return num_gpus < gpus_per_node ? num_gpus : gpus_per_node; }
};

// The cluster used when a command is given none.
inline constexpr const char* kDefaultCluster = "dgx-h100";

std::vector<std::string> cluster_zoo_names();

// Reads a cluster file; `label` names it in errors. num_gpus starts at one node.
ClusterSpec cluster_from_json(const nlohmann::json& json, const std::string& label);

// The cluster file's JSON as written (a zoo entry's built-in text or the file), and the
// label that names it in errors; what `calibrate` edits and writes back.
std::pair<nlohmann::json, std::string> cluster_json(const std::string& name_or_file);

// A zoo name or a path to a cluster JSON file, sized by `nodes` or `gpus` (at most one;
// neither means one node). A GPU count above one node must fill whole nodes.
ClusterSpec load_cluster(const std::string& name_or_file, std::optional<int64_t> nodes,
                         std::optional<int64_t> gpus);

}  // namespace shardplan
