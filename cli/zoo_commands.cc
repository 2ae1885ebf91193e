#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "executor/cuda_probe.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "models/zoo.h"

namespace shardplan {

int run_models(const ZooParams& params, std::ostream& out) {
  nlohmann::json list = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& name : model_zoo_names()) {
    const ModelSpec m = load_model(name);
    const int64_t total = parameter_count(m.root);
    const double active = active_parameter_count(m.root);
    list.push_back({{"name", m.name},
                    {"family", m.family},
                    {"parameters", total},
                    {"active_parameters", active},
                    {"num_layers", m.num_layers},
                    {"hidden_size", m.hidden_size},
                    {"vocab_size", m.vocab_size},
                    {"source", m.source}});
    rows.push_back({m.name, m.family, format_count(static_cast<double>(total)),
                    format_count(active), std::to_string(m.num_layers),
                    std::to_string(m.hidden_size), std::to_string(m.vocab_size)});
  }
  if (params.json) {
    out << json_text(nlohmann::json{{"models", list}}, 2) << "\n";
  } else {
    out << render_table({"model", "family", "params", "active", "layers", "hidden", "vocab"}, rows,
                        {2, 3, 4, 5, 6});
  }
  return 0;
}

int run_clusters(const ZooParams& params, std::ostream& out) {
  nlohmann::json list = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& name : cluster_zoo_names()) {
    const ClusterSpec c = load_cluster(name, std::nullopt, std::nullopt);
    list.push_back({{"name", c.name},
                    {"description", c.description},
                    {"gpu", c.gpu.name},
                    {"gpus_per_node", c.gpus_per_node},
                    {"hbm_bytes", c.gpu.hbm_bytes},
                    {"hbm_bandwidth_bytes_per_s", c.gpu.hbm_bandwidth_bytes_per_s},
                    {"bf16_dense_flops", c.gpu.bf16_dense_flops},
                    {"fp8_dense_flops", c.gpu.fp8_dense_flops},
                    {"sm_count", c.gpu.sm_count},
                    {"intra_node_bandwidth_bytes_per_s", c.intra_node.bandwidth_bytes_per_s},
                    {"inter_node_bandwidth_bytes_per_s", c.inter_node.bandwidth_bytes_per_s},
                    {"non_tensor_bytes", c.non_tensor_bytes}});
    rows.push_back(
        {c.name, c.gpu.name, std::to_string(c.gpus_per_node),
         format_bytes(static_cast<double>(c.gpu.hbm_bytes)),
         fmt::format("{:.2f}", c.gpu.hbm_bandwidth_bytes_per_s / 1e12),
         fmt::format("{:.0f}", c.gpu.bf16_dense_flops / 1e12),
         c.gpu.fp8_dense_flops > 0 ? fmt::format("{:.0f}", c.gpu.fp8_dense_flops / 1e12) : "-",
         std::to_string(c.gpu.sm_count),
         fmt::format("{:.0f}", c.intra_node.bandwidth_bytes_per_s / 1e9),
         fmt::format("{:.0f}", c.inter_node.bandwidth_bytes_per_s / 1e9)});
  }
  if (params.json) {
    out << json_text(nlohmann::json{{"clusters", list}}, 2) << "\n";
  } else {
    out << render_table({"cluster", "gpu", "gpus/node", "memory", "HBM TB/s", "BF16 TFLOP/s",
                         "FP8 TFLOP/s", "SMs", "NVLink GB/s", "NIC GB/s"},
                        rows, {2, 3, 4, 5, 6, 7, 8, 9});
    out << "Bandwidths are per GPU and per direction; peaks are dense. Sources: "
           "models/clusters/<name>.json.\n";
  }
  return 0;
}

int run_version(bool json, std::ostream& out) {
  const CudaProbe probe = probe_cuda();
  if (json) {
    out << json_text(nlohmann::json{{"version", SHARDPLAN_VERSION},
                                    {"cuda_backend", probe.compiled},
                                    {"cuda_plugin", probe.plugin_path},
                                    {"cuda_runtime_version", probe.runtime_version},
                                    {"nccl_version", probe.nccl_version},
                                    {"cublas_version", probe.cublas_version},
                                    {"cuda_devices", probe.device_count},
                                    {"cuda_device_error", probe.device_error}},
                     2)
        << "\n";
    return 0;
  }
  out << "shardplan " << SHARDPLAN_VERSION << "\n";
  if (probe.compiled) {
    out << fmt::format("CUDA backend: runtime {}, NCCL {}, cuBLAS {}; ", probe.runtime_version,
                       probe.nccl_version, probe.cublas_version);
    if (probe.device_count > 0) {
      out << fmt::format("{} device(s)\n", probe.device_count);
    } else {
      out << "no CUDA device (" << probe.device_error << ")\n";
    }
  } else {
    out << "CUDA backend: not built\n";
  }
  return 0;
}

Command add_models_command(CLI::App& app) {
  auto params = std::make_shared<ZooParams>();
  ZooParams& p = *params;
  auto* models = app.add_subcommand("models", "list the built-in models");
  models->add_flag("--json", p.json, "machine-readable output");
  return {models, [params] { return run_models(*params, std::cout); }};
}

Command add_clusters_command(CLI::App& app) {
  auto params = std::make_shared<ZooParams>();
  ZooParams& p = *params;
  auto* clusters = app.add_subcommand("clusters", "list the built-in clusters");
  clusters->add_flag("--json", p.json, "machine-readable output");
  return {clusters, [params] { return run_clusters(*params, std::cout); }};
}

Command add_version_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* version = app.add_subcommand("version", "version and CUDA backend status");
  version->add_flag("--json", *json, "machine-readable output");
  return {version, [json] { return run_version(*json, std::cout); }};
}

}  // namespace shardplan
