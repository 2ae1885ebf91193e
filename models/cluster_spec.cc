#include "models/cluster_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "models/embedded_files.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

// Physically plausible ranges, each wide enough for every GPU and network built or
// announced (V100 to Rubin Ultra; 10 GbE to NVLink 5) and narrow enough to catch a unit
// slip (bits for bytes, GB for bytes, ms for s), which would otherwise give a confident,
// wrong answer.
constexpr double kMinHbmBandwidth = 1e10;  // 10 GB/s; V100 has 0.9 TB/s
// 100 TB/s: B200 has 8 TB/s, and NVIDIA announces 32 TB/s for Rubin Ultra (HBM4E, 2027).
constexpr double kMaxHbmBandwidth = 1e14;
constexpr double kMinFlops = 1e12;  // 1 TFLOP/s; V100 has 125 (fp16 tensor)
// 100 PFLOP/s: B200 has 2.25e15 dense BF16; NVIDIA announces 100 PFLOP/s of FP4 (its
// fastest format) for a Rubin Ultra package (GTC 2025).
constexpr double kMaxFlops = 1e17;
constexpr double kMinLinkBandwidth = 1e8;    // 100 MB/s (1 GbE is 125 MB/s)
constexpr double kMaxLinkBandwidth = 1e14;   // 100 TB/s; NVLink 5 has 0.9 TB/s per direction
constexpr double kMaxLatencySeconds = 1e-2;  // 10 ms; NCCL's hop latencies are microseconds
constexpr int64_t kMaxSms = 4096;            // H100 has 132, B200 148
constexpr double kMinWatts = 50;             // below any datacenter GPU's minimum limit
constexpr double kMaxWatts = 5000;           // GB300 boards are 1400 W

constexpr NameTable<NcclAlgorithm, 4> kAlgorithmNames = {{{NcclAlgorithm::ring, "ring"},
                                                          {NcclAlgorithm::tree, "tree"},
                                                          {NcclAlgorithm::nvls, "nvls"},
                                                          {NcclAlgorithm::p2p, "p2p"}}};
constexpr NameTable<NcclProtocol, 3> kProtocolNames = {
    {{NcclProtocol::ll, "LL"}, {NcclProtocol::ll128, "LL128"}, {NcclProtocol::simple, "Simple"}}};
constexpr NameTable<NetworkTier, 2> kTierNames = {
    {{NetworkTier::intra_node, "intra_node"}, {NetworkTier::inter_node, "inter_node"}}};

using cluster_bounds::kMaxCalibrationScale;
using cluster_bounds::kMinCalibrationScale;

// A measured rate above its line rate or datasheet peak is a unit slip or a number from
// another part: it would make the model faster than the hardware can run. Reported at the
// measured field.
void check_measured_below_peak(const JsonReader& r, std::string_view measured_key, double measured,
                               std::string_view peak_key, double peak) {
  if (measured > peak) {
    r.fail(measured_key, fmt::format("{:g} B/s exceeds {} ({:g} B/s): a measured rate cannot "
                                     "beat the peak it is measured against",
                                     measured, peak_key, peak));
  }
}

template <typename Enum, std::size_t N>
Enum parse_name(const JsonReader& r, std::string_view key, const NameTable<Enum, N>& table) {
  const std::string text = r.string(key);
  const std::optional<Enum> value = value_of(table, text);
  if (!value) {
    r.fail(key, unknown_name_message(std::string(key), text, names_of(table)));
  }
  return *value;
}

std::vector<CollectiveCalibration> parse_collective_calibration(const JsonReader& parent) {
  std::vector<CollectiveCalibration> entries;
  for (const JsonReader& r : parent.objects("collective_calibration")) {
    r.expect_only({"tier", "algorithm", "protocol", "latency_scale", "bandwidth_scale", "points",
                   "r2", "rms_relative_error"});
    CollectiveCalibration c{
        .tier = parse_name(r, "tier", kTierNames),
        .algorithm = parse_name(r, "algorithm", kAlgorithmNames),
        .protocol = parse_name(r, "protocol", kProtocolNames),
        .latency_scale = r.number_in("latency_scale", kMinCalibrationScale, kMaxCalibrationScale),
        .bandwidth_scale =
            r.number_in("bandwidth_scale", kMinCalibrationScale, kMaxCalibrationScale),
        .points = r.integer_in_or("points", 0, limits::kMaxGpus, 0),
        .r2 = r.number_or("r2", 0),
        .rms_relative_error = r.number_or("rms_relative_error", 0)};
    for (const CollectiveCalibration& e : entries) {
      if (e.tier == c.tier && e.algorithm == c.algorithm && e.protocol == c.protocol) {
        r.fail("tier",
               fmt::format("a second entry for {} {}/{}", network_tier_name(c.tier),
                           nccl_algorithm_name(c.algorithm), nccl_protocol_name(c.protocol)));
      }
    }
    entries.push_back(c);
  }
  return entries;
}

GpuSpec parse_gpu(const JsonReader& r) {
  r.expect_only({"name", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
                 "hbm_measured_bandwidth_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops",
                 "sm_count", "tdp_watts", "power_limit_watts"});
  GpuSpec gpu{
      .name = r.string("name"),
      .hbm_bytes =
          r.integer_in("hbm_bytes", limits::kMinGpuMemoryBytes, limits::kMaxGpuMemoryBytes),
      .hbm_bandwidth_bytes_per_s =
          r.number_in("hbm_bandwidth_bytes_per_s", kMinHbmBandwidth, kMaxHbmBandwidth),
      .hbm_measured_bandwidth_bytes_per_s =
          r.number_in("hbm_measured_bandwidth_bytes_per_s", kMinHbmBandwidth, kMaxHbmBandwidth),
      .bf16_dense_flops = r.number_in("bf16_dense_flops", kMinFlops, kMaxFlops),
      .fp8_dense_flops = r.number_in("fp8_dense_flops", 0, kMaxFlops),
      .sm_count = r.integer_in("sm_count", 1, kMaxSms),
  };
  check_measured_below_peak(r, "hbm_measured_bandwidth_bytes_per_s",
                            gpu.hbm_measured_bandwidth_bytes_per_s, "hbm_bandwidth_bytes_per_s",
                            gpu.hbm_bandwidth_bytes_per_s);
  if (gpu.fp8_dense_flops > 0 && gpu.fp8_dense_flops < kMinFlops) {
    r.fail("fp8_dense_flops", fmt::format("must be 0 (no FP8) or in [{:g}, {:g}], got {:g}",
                                          kMinFlops, kMaxFlops, gpu.fp8_dense_flops));
  }
  if (r.has("tdp_watts")) gpu.tdp_watts = r.number_in("tdp_watts", kMinWatts, kMaxWatts);
  if (r.has("power_limit_watts")) {
    if (gpu.tdp_watts == 0) {
      r.fail("power_limit_watts", "a power limit needs the GPU's tdp_watts to compare with");
    }
    gpu.power_limit_watts = r.number_in("power_limit_watts", kMinWatts, kMaxWatts);
  }
  return gpu;
}

LinkSpec parse_link(const JsonReader& r) {
  r.expect_only(
      {"name", "bandwidth_bytes_per_s", "measured_bus_bandwidth_bytes_per_s", "latency_s"});
  LinkSpec link{
      .name = r.string("name"),
      .bandwidth_bytes_per_s =
          r.number_in("bandwidth_bytes_per_s", kMinLinkBandwidth, kMaxLinkBandwidth),
      .measured_bus_bandwidth_bytes_per_s =
          r.number_in("measured_bus_bandwidth_bytes_per_s", kMinLinkBandwidth, kMaxLinkBandwidth),
      .latency_s = r.number_in("latency_s", 0, kMaxLatencySeconds),
  };
  // A ring's bus bandwidth is what each link carries per direction (nccl-tests'
  // PERFORMANCE.md): it cannot exceed the line rate. (NVLS beats the ring by reducing in
  // the switch; the model derives it from the ring's value, collective_model.cc.)
  check_measured_below_peak(r, "measured_bus_bandwidth_bytes_per_s",
                            link.measured_bus_bandwidth_bytes_per_s, "bandwidth_bytes_per_s",
                            link.bandwidth_bytes_per_s);
  return link;
}

constexpr NameTable<CollectiveLibrary, 2> kLibraryNames = {
    {{CollectiveLibrary::nccl, "nccl"}, {CollectiveLibrary::rccl, "rccl"}}};

// "2.19" or "2.19.3" as NCCL_VERSION_CODE; NCCL 2 from 2.0 to 2.99.
int64_t parse_nccl_version(const JsonReader& r, std::string_view key) {
  const std::string text = r.string(key);
  int64_t part[3] = {0, 0, 0};
  int parts = 0;
  std::size_t i = 0;
  while (parts < 3 && i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    int64_t v = 0;
    std::size_t digits = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && digits < 3;
         ++i, ++digits)
      v = v * 10 + (text[i] - '0');
    part[parts++] = v;
    if (i < text.size() && text[i] == '.') ++i;
  }
  if (parts < 2 || i != text.size() || part[0] != 2 || part[1] > 99 || part[2] > 99) {
    r.fail(key, fmt::format("{} is not an NCCL 2 version such as \"2.19\" or \"2.21.5\"",
                            quote_input(text)));
  }
  return part[0] * 10000 + part[1] * 100 + part[2];
}

NcclSpec parse_nccl(const JsonReader& r) {
  r.expect_only({"library", "base_latency_s", "collective_sms", "nvls", "ib_sharp", "channels",
                 "channels_multi_node", "p2p_channels_per_peer", "nvls_channels", "version"});
  const NcclSpec defaults;
  // NCCL's MAXCHANNELS (src/include/device.h): no communicator builds more.
  constexpr int64_t kMaxChannels = 64;
  auto channels = [&](std::string_view key, int64_t fallback) {
    return r.integer_in_or(key, 1, kMaxChannels, fallback);
  };
  return NcclSpec{
      .library =
          r.has("library") ? parse_name(r, "library", kLibraryNames) : CollectiveLibrary::nccl,
      .base_latency_s = r.number_in("base_latency_s", 0, kMaxLatencySeconds),
      .collective_sms = r.integer("collective_sms"),
      .nvls = r.boolean("nvls"),
      .ib_sharp = r.boolean("ib_sharp"),
      .channels = channels("channels", defaults.channels),
      .channels_multi_node = channels("channels_multi_node", defaults.channels_multi_node),
      .p2p_channels_per_peer = channels("p2p_channels_per_peer", defaults.p2p_channels_per_peer),
      .nvls_channels = channels("nvls_channels", defaults.nvls_channels),
      .version_code = r.has("version") ? parse_nccl_version(r, "version") : defaults.version_code,
  };
}

constexpr NameTable<GemmPrecision, 2> kGemmPrecisionNames = {
    {{GemmPrecision::bf16, "bf16"}, {GemmPrecision::fp8, "fp8"}}};

// A measured table: {precision, grouped, source, points: [{m, n, k, groups, tflops}]},
// fitted against the GPU's peak of that precision, or against the sibling GPU it was
// measured on (`measured_on`).
GemmTable parse_gemm_table(const JsonReader& r, const GpuSpec& gpu) {
  r.expect_only({"precision", "grouped", "source", "measured_on", "points"});
  GemmTable t;
  t.precision = parse_name(r, "precision", kGemmPrecisionNames);
  t.grouped = r.boolean_or("grouped", false);
  t.source = r.string("source");
  if (t.source.empty()) r.fail("source", "must name where the measurements come from");
  const double own_peak =
      t.precision == GemmPrecision::fp8 ? gpu.fp8_dense_flops : gpu.bf16_dense_flops;
  if (!(own_peak > 0)) r.fail("precision", "the GPU has no dense peak of this precision");
  double peak = own_peak, hbm = gpu.hbm_bandwidth_bytes_per_s;
  int64_t sms = gpu.sm_count;
  if (r.has("measured_on")) {
    // The sibling's datasheet, which its measurements are fitted against; this GPU then
    // runs them relative_speed times as fast (at its own power limit).
    const JsonReader m = r.object("measured_on");
    m.expect_only({"gpu", "peak_flops", "sm_count", "hbm_bandwidth_bytes_per_s", "relative_speed"});
    t.measured_on = m.string("gpu");
    if (t.measured_on.empty()) m.fail("gpu", "must name the GPU the table was measured on");
    peak = m.number_in("peak_flops", kMinFlops, kMaxFlops);
    sms = m.integer_in("sm_count", 1, kMaxSms);
    hbm = m.number_in("hbm_bandwidth_bytes_per_s", kMinHbmBandwidth, kMaxHbmBandwidth);
    // A sibling GPU, not another generation: within 2x either way.
    t.relative_speed = m.number_in("relative_speed", 0.5, 2);
    t.reference_peak_flops = own_peak;
  }
  for (const JsonReader& p : r.objects("points")) {
    p.expect_only({"m", "n", "k", "groups", "tflops"});
    GemmPoint point{.m = p.integer_in("m", 1, INT32_MAX),
                    .n = p.integer_in("n", 1, INT32_MAX),
                    .k = p.integer_in("k", 1, INT32_MAX),
                    .groups = p.integer_in_or("groups", 1, 1 << 20, 1)};
    // A measurement above the datasheet is a wrong row, not a fast GPU.
    const double tflops = p.number_in("tflops", 1e-3, peak / 1e12);  // the measured GPU's
    point.seconds = 2.0 * static_cast<double>(point.m) * static_cast<double>(point.n) *
                    static_cast<double>(point.k) * static_cast<double>(point.groups) /
                    (tflops * 1e12);
    t.points.push_back(point);
  }
  if (t.points.size() < 3) r.fail("points", "a table needs at least three measured shapes");
  fit_gemm_table(t, peak, sms, hbm);
  return t;
}

// Optional: a file without it gets the defaults of ComputeSpec.
ComputeSpec parse_compute(const JsonReader& r, const GpuSpec& gpu) {
  r.expect_only({"gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency",
                 "sdpa_attention_efficiency", "elementwise_efficiency", "optimizer_efficiency",
                 "overlap_slowdown", "gemm_tables"});
  const ComputeSpec d;
  auto fraction = [&](std::string_view key, double fallback) {
    return r.has(key)
               ? r.number_in(key, cluster_bounds::kMinEfficiency, cluster_bounds::kMaxEfficiency)
               : fallback;
  };
  ComputeSpec c{
      .gemm_efficiency = fraction("gemm_efficiency", d.gemm_efficiency),
      .fp8_gemm_efficiency = fraction("fp8_gemm_efficiency", d.fp8_gemm_efficiency),
      .attention_efficiency = fraction("attention_efficiency", d.attention_efficiency),
      .sdpa_attention_efficiency = 0,
      .elementwise_efficiency = fraction("elementwise_efficiency", d.elementwise_efficiency),
      .optimizer_efficiency = fraction("optimizer_efficiency", d.optimizer_efficiency),
      .overlap_slowdown = d.overlap_slowdown};
  c.sdpa_attention_efficiency = fraction("sdpa_attention_efficiency", c.attention_efficiency);
  if (r.has("overlap_slowdown")) {
    c.overlap_slowdown = r.number_in("overlap_slowdown", 0, cluster_bounds::kMaxOverlapSlowdown);
  }
  if (r.has("gemm_tables")) {
    for (const JsonReader& t : r.objects("gemm_tables")) {
      GemmTable table = parse_gemm_table(t, gpu);
      if (std::any_of(c.gemm_tables.begin(), c.gemm_tables.end(), [&](const GemmTable& e) {
            return e.precision == table.precision && e.grouped == table.grouped;
          })) {
        t.fail("precision", "a second table of this precision and kind");
      }
      c.gemm_tables.push_back(std::move(table));
    }
  }
  return c;
}

}  // namespace

const GemmTable* find_gemm_table(const ComputeSpec& compute, GemmPrecision precision,
                                 bool grouped) {
  const GemmTable* dense = nullptr;
  for (const GemmTable& t : compute.gemm_tables) {
    if (t.precision != precision) continue;
    if (t.grouped == grouped) return &t;
    if (!t.grouped) dense = &t;
  }
  return dense;
}

std::string_view nccl_algorithm_name(NcclAlgorithm a) {
  return name_of(kAlgorithmNames, a);
}
std::string_view nccl_protocol_name(NcclProtocol p) {
  return name_of(kProtocolNames, p);
}
std::string_view network_tier_name(NetworkTier t) {
  return name_of(kTierNames, t);
}

std::vector<std::string> cluster_zoo_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : cluster_zoo_files()) names.emplace_back(f.name);
  std::sort(names.begin(), names.end());
  return names;
}

ClusterSpec cluster_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only({"name", "description", "notes", "gpus_per_node", "gpu", "intra_node", "inter_node",
                 "host_link", "host_cpu", "nccl", "compute", "collective_calibration",
                 "non_tensor_bytes", "sources"});
  ClusterSpec c;
  c.name = r.string("name");
  c.description = r.string_or("description", "");
  c.gpus_per_node = r.integer_in("gpus_per_node", 1, limits::kMaxGpusPerNode);
  c.num_gpus = c.gpus_per_node;
  c.gpu = parse_gpu(r.object("gpu"));
  c.intra_node = parse_link(r.object("intra_node"));
  c.inter_node = parse_link(r.object("inter_node"));
  c.nccl = parse_nccl(r.object("nccl"));
  if (r.has("host_link")) {
    const JsonReader h = r.object("host_link");
    h.expect_only({"name", "bandwidth_bytes_per_s", "measured_bandwidth_bytes_per_s"});
    c.host_link.name = h.string("name");
    c.host_link.bandwidth_bytes_per_s =
        h.number_in("bandwidth_bytes_per_s", kMinLinkBandwidth, kMaxLinkBandwidth);
    c.host_link.measured_bandwidth_bytes_per_s =
        h.number_in("measured_bandwidth_bytes_per_s", kMinLinkBandwidth, kMaxLinkBandwidth);
    check_measured_below_peak(h, "measured_bandwidth_bytes_per_s",
                              c.host_link.measured_bandwidth_bytes_per_s, "bandwidth_bytes_per_s",
                              c.host_link.bandwidth_bytes_per_s);
  }
  if (r.has("host_cpu")) {
    const JsonReader h = r.object("host_cpu");
    h.expect_only({"name", "time_scale"});
    c.host_cpu.name = h.string("name");
    // A tenth to twenty times the reference: the slowest published host (Grace, 2.75) and
    // any CPU that drives a GPU lie well inside.
    c.host_cpu.time_scale = h.number_in("time_scale", 0.1, 20.0);
  }
  if (r.has("compute")) c.compute = parse_compute(r.object("compute"), c.gpu);
  if (r.has("collective_calibration")) c.collective_calibration = parse_collective_calibration(r);
  // NCCL launches one CTA (on one SM) per channel and runs every collective on at least
  // one channel: NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS accept "any value above or equal
  // to 1" and NCCL_MIN_CTAS a positive integer (NCCL's environment-variable docs; RCCL's
  // say the same). The opt-in zero-CTA policy of recent NCCL (NCCL_CTA_POLICY_ZERO: copy
  // engines for some all-gathers and all-to-alls, 2.30 release notes) is not what the model
  // prices.
  if (c.nccl.collective_sms < 1 || c.nccl.collective_sms >= c.gpu.sm_count) {
    r.object("nccl").fail("collective_sms",
                          fmt::format("must be in 1..{} (at least one SM, as NCCL runs every "
                                      "collective on at least one channel; below the GPU's "
                                      "sm_count), got {}",
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

std::pair<nlohmann::json, std::string> cluster_json(const std::string& name_or_file) {
  for (const EmbeddedFile& f : cluster_zoo_files()) {
    if (f.name == name_or_file) {
      std::string label = fmt::format("models/clusters/{}.json", f.name);
      return {parse_json_text(f.text, label), label};
    }
  }
  const bool looks_like_path =
      name_or_file.find('/') != std::string::npos || name_or_file.ends_with(".json");
  std::error_code missing;  // a name too long for a path is no file, not an exception
  if (!looks_like_path && !std::filesystem::exists(name_or_file, missing)) {
    throw InputError("", "--cluster",
                     unknown_name_message("cluster", name_or_file, cluster_zoo_names()) +
                         "; or give a path to a cluster JSON file");
  }
  return {read_json_file(name_or_file), name_or_file};
}

ClusterSpec load_cluster(const std::string& name_or_file, std::optional<int64_t> nodes,
                         std::optional<int64_t> gpus) {
  const auto [json, label] = cluster_json(name_or_file);
  ClusterSpec cluster = cluster_from_json(json, label);
  if (nodes && gpus) throw InputError("", "--nodes", "give either --nodes or --gpus, not both");
  if (nodes) {
    if (*nodes <= 0)
      throw InputError("", "--nodes", fmt::format("must be positive, got {}", *nodes));
    if (*nodes > limits::kMaxGpus / cluster.gpus_per_node) {
      throw InputError("", "--nodes",
                       fmt::format("{} nodes of {} GPUs exceed {} GPUs (2^20), the most shardplan "
                                   "plans for",
                                   *nodes, cluster.gpus_per_node, limits::kMaxGpus));
    }
    cluster.num_gpus = *nodes * cluster.gpus_per_node;
  } else if (gpus) {
    if (*gpus <= 0) throw InputError("", "--gpus", fmt::format("must be positive, got {}", *gpus));
    if (*gpus > limits::kMaxGpus) {
      throw InputError("", "--gpus",
                       fmt::format("{} exceeds {} GPUs (2^20), the most shardplan plans for", *gpus,
                                   limits::kMaxGpus));
    }
    if (*gpus > cluster.gpus_per_node && *gpus % cluster.gpus_per_node != 0) {
      throw InputError("", "--gpus",
                       fmt::format("{} GPUs do not fill whole nodes of {} on {}", *gpus,
                                   cluster.gpus_per_node, cluster.name));
    }
    cluster.num_gpus = *gpus;
  }
  return cluster;
}

double power_limited_compute_share(const GpuSpec& gpu) {
  if (gpu.tdp_watts <= 0 || gpu.power_limit_watts <= 0 || gpu.power_limit_watts >= gpu.tdp_watts) {
    return 1.0;
  }
  return std::pow(gpu.power_limit_watts / gpu.tdp_watts, 0.48);
}

}  // namespace shardplan
