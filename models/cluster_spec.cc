#include "models/cluster_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "models/embedded_files.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

double positive_number(const JsonReader& r, std::string_view key) {
  const double v = r.number(key);
  if (!(v > 0)) r.fail(key, fmt::format("must be positive, got {}", v));
  return v;
}

GpuSpec parse_gpu(const JsonReader& r) {
  r.expect_only({"name", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
                 "hbm_measured_bandwidth_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops",
                 "sm_count"});
  return GpuSpec{
      .name = r.string("name"),
      .hbm_bytes = r.positive_integer("hbm_bytes"),
      .hbm_bandwidth_bytes_per_s = positive_number(r, "hbm_bandwidth_bytes_per_s"),
      .hbm_measured_bandwidth_bytes_per_s =
          positive_number(r, "hbm_measured_bandwidth_bytes_per_s"),
      .bf16_dense_flops = positive_number(r, "bf16_dense_flops"),
      .fp8_dense_flops = r.non_negative_number("fp8_dense_flops"),
      .sm_count = r.positive_integer("sm_count"),
  };
}

LinkSpec parse_link(const JsonReader& r) {
  r.expect_only(
      {"name", "bandwidth_bytes_per_s", "measured_bus_bandwidth_bytes_per_s", "latency_s"});
  return LinkSpec{
      .name = r.string("name"),
      .bandwidth_bytes_per_s = positive_number(r, "bandwidth_bytes_per_s"),
      .measured_bus_bandwidth_bytes_per_s =
          positive_number(r, "measured_bus_bandwidth_bytes_per_s"),
      .latency_s = r.non_negative_number("latency_s"),
  };
}

NcclSpec parse_nccl(const JsonReader& r) {
  r.expect_only({"base_latency_s", "collective_sms", "nvls", "ib_sharp"});
  return NcclSpec{
      .base_latency_s = r.non_negative_number("base_latency_s"),
      .collective_sms = r.integer("collective_sms"),
      .nvls = r.boolean("nvls"),
      .ib_sharp = r.boolean("ib_sharp"),
  };
}

// Optional: a file without it gets the defaults of ComputeSpec.
ComputeSpec parse_compute(const JsonReader& r) {
  r.expect_only({"gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency",
                 "elementwise_efficiency", "optimizer_efficiency", "overlap_slowdown"});
  const ComputeSpec d;
  auto fraction = [&](std::string_view key, double fallback) {
    const double v = r.number_or(key, fallback);
    if (!(v > 0 && v <= 1)) r.fail(key, fmt::format("must be in (0, 1], got {}", v));
    return v;
  };
  ComputeSpec c{
      .gemm_efficiency = fraction("gemm_efficiency", d.gemm_efficiency),
      .fp8_gemm_efficiency = fraction("fp8_gemm_efficiency", d.fp8_gemm_efficiency),
      .attention_efficiency = fraction("attention_efficiency", d.attention_efficiency),
      .elementwise_efficiency = fraction("elementwise_efficiency", d.elementwise_efficiency),
      .optimizer_efficiency = fraction("optimizer_efficiency", d.optimizer_efficiency),
      .overlap_slowdown = r.number_or("overlap_slowdown", d.overlap_slowdown)};
  if (!(c.overlap_slowdown >= 0 && c.overlap_slowdown <= 4))
    r.fail("overlap_slowdown", fmt::format("must be in [0, 4], got {}", c.overlap_slowdown));
  return c;
}

}  // namespace

std::vector<std::string> cluster_zoo_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : cluster_zoo_files()) names.emplace_back(f.name);
  std::sort(names.begin(), names.end());
  return names;
}

ClusterSpec cluster_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only({"name", "description", "notes", "gpus_per_node", "gpu", "intra_node", "inter_node",
                 "nccl", "compute", "non_tensor_bytes", "sources"});
  ClusterSpec c;
  c.name = r.string("name");
  c.description = r.string_or("description", "");
  c.gpus_per_node = r.positive_integer("gpus_per_node");
  c.num_gpus = c.gpus_per_node;
  c.gpu = parse_gpu(r.object("gpu"));
  c.intra_node = parse_link(r.object("intra_node"));
  c.inter_node = parse_link(r.object("inter_node"));
  c.nccl = parse_nccl(r.object("nccl"));
  if (r.has("compute")) c.compute = parse_compute(r.object("compute"));
  if (c.nccl.collective_sms < 0 || c.nccl.collective_sms >= c.gpu.sm_count) {
    r.fail("nccl", fmt::format("collective_sms must be in 0..{} (the GPU's SMs), got {}",
                               c.gpu.sm_count - 1, c.nccl.collective_sms));
  }
  c.non_tensor_bytes = r.integer("non_tensor_bytes");
  if (c.non_tensor_bytes < 0 || c.non_tensor_bytes >= c.gpu.hbm_bytes) {
    r.fail("non_tensor_bytes", "must be at least 0 and below gpu.hbm_bytes");
  }
  if (r.has("sources")) {
    const JsonReader sources = r.object("sources");
    for (const auto& [key, value] : sources.json().items()) {
      if (!value.is_string()) sources.fail(key, "a source must be a string");
      c.sources[key] = value.get<std::string>();
    }
  }
  return c;
}

ClusterSpec load_cluster(const std::string& name_or_file, std::optional<int64_t> nodes,
                         std::optional<int64_t> gpus) {
  ClusterSpec cluster;
  bool found = false;
  for (const EmbeddedFile& f : cluster_zoo_files()) {
    if (f.name == name_or_file) {
      const std::string label = fmt::format("models/clusters/{}.json", f.name);
      cluster = cluster_from_json(parse_json_text(f.text, label), label);
      found = true;
    }
  }
  if (!found) {
    const bool looks_like_path =
        name_or_file.find('/') != std::string::npos || name_or_file.ends_with(".json");
    if (!looks_like_path && !std::filesystem::exists(name_or_file)) {
      throw InputError("", "--cluster",
                       unknown_name_message("cluster", name_or_file, cluster_zoo_names()) +
                           "; or give a path to a cluster JSON file");
    }
    cluster = cluster_from_json(read_json_file(name_or_file), name_or_file);
  }
  if (nodes && gpus) throw InputError("", "--nodes", "give either --nodes or --gpus, not both");
  if (nodes) {
    if (*nodes <= 0)
      throw InputError("", "--nodes", fmt::format("must be positive, got {}", *nodes));
    cluster.num_gpus = *nodes * cluster.gpus_per_node;
  } else if (gpus) {
    if (*gpus <= 0) throw InputError("", "--gpus", fmt::format("must be positive, got {}", *gpus));
    if (*gpus > cluster.gpus_per_node && *gpus % cluster.gpus_per_node != 0) {
      throw InputError("", "--gpus",
                       fmt::format("{} GPUs do not fill whole nodes of {} on {}", *gpus,
                                   cluster.gpus_per_node, cluster.name));
    }
    cluster.num_gpus = *gpus;
  }
  return cluster;
}

}  // namespace shardplan
