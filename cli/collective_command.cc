#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"
#include "models/text_format.h"
#include "simulator/collective_model.h"

namespace shardplan {
namespace {

Collective parse_op(const std::string& text) {
  if (auto op = parse_collective(text)) return *op;
  throw InputError("", "--op", unknown_name_message("collective", text, collective_names()));
}

nlohmann::json row_json(double bytes, const CollectiveEstimate& e) {
  return {{"bytes", bytes},
          {"seconds", e.seconds},
          {"latency_seconds", e.latency_seconds},
          {"algbw_bytes_per_s", e.algbw_bytes_per_s},
          {"busbw_bytes_per_s", e.busbw_bytes_per_s},
          {"algorithm", nccl_algorithm_name(e.algorithm)},
          {"protocol", nccl_protocol_name(e.protocol)}};
}

std::vector<std::string> row_text(double bytes, const CollectiveEstimate& e) {
  return {fmt::format("{:.0f}", bytes),
          format_bytes(bytes),
          fmt::format("{:.2f}", e.seconds * 1e6),
          fmt::format("{:.2f}", e.algbw_bytes_per_s / 1e9),
          fmt::format("{:.2f}", e.busbw_bytes_per_s / 1e9),
          fmt::format("{}/{}", nccl_algorithm_name(e.algorithm), nccl_protocol_name(e.protocol))};
}

}  // namespace

int run_collective(const CollectiveParams& p, std::ostream& out) {
  const ClusterSpec cluster = load_cluster(p.cluster, p.nodes, p.gpus);
  const Collective op = parse_op(p.op);
  const int64_t ranks = p.ranks.value_or(cluster.num_gpus);
  if (ranks <= 0) throw InputError("", "--ranks", "must be positive");
  if (ranks > cluster.num_gpus) {
    throw InputError("", "--ranks",
                     fmt::format("{} ranks exceed the {} GPUs of the job (use --nodes)", ranks,
                                 cluster.num_gpus));
  }
  const RankLayout layout{ranks, cluster.gpus_per_node};
  std::vector<double> sizes;
  if (p.sweep) {
    for (double bytes = 1024; bytes <= 8.0 * 1073741824.0; bytes *= 2) sizes.push_back(bytes);
  } else {
    if (p.bytes.empty()) throw InputError("", "--bytes", "give a size, or --sweep");
    // 1 PiB: no GPU holds a message of that; nccl-tests stop at a few GiB.
    sizes.push_back(parse_size(p.bytes, "--bytes", 0x1p50));
  }
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::vector<std::string>> table;
  for (double bytes : sizes) {
    const CollectiveEstimate e = estimate_collective(cluster, op, bytes, layout);
    rows.push_back(row_json(bytes, e));
    table.push_back(row_text(bytes, e));
  }
  if (p.json) {
    out << json_text(nlohmann::json{{"cluster", cluster.name},
                                    {"op", collective_name(op)},
                                    {"ranks", ranks},
                                    {"nodes", layout.nodes()},
                                    {"results", rows}},
                     2)
        << "\n";
    return 0;
  }
  out << fmt::format("{} over {} ranks of {} ({} node{}), predicted (nccl-tests conventions):\n",
                     collective_name(op), ranks, cluster.name, layout.nodes(),
                     layout.nodes() == 1 ? "" : "s");
  out << render_table(
      {"size (B)", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm"}, table,
      {0, 1, 2, 3, 4});
  return 0;
}

Command add_collective_command(CLI::App& app) {
  auto params = std::make_shared<CollectiveParams>();
  CollectiveParams& p = *params;
  p.cluster = kDefaultCluster;
  auto* collective = app.add_subcommand(
      "collective", "predicted time, algbw and busbw of one NCCL collective (nccl-tests style)");
  collective->add_option("--cluster", p.cluster, "zoo cluster name or cluster JSON file")
      ->capture_default_str();
  collective->add_option("--nodes", p.nodes, "nodes in the job (default 1)")
      ->check(positive_whole_number());
  collective->add_option("--gpus", p.gpus, "GPUs in the job, instead of --nodes")
      ->check(positive_whole_number());
  collective->add_option("--op", p.op, "all_gather | reduce_scatter | all_reduce")->required();
  collective->add_option("--bytes", p.bytes, "size as nccl-tests counts it: 4096, 64K, 1GiB, 1GB");
  collective->add_option("--ranks", p.ranks, "ranks taking part (default: every GPU)")
      ->check(positive_whole_number());
  collective->add_flag("--sweep", p.sweep, "a table from 1 KiB to 8 GiB");
  collective->add_flag("--json", p.json, "machine-readable output");

  return {collective, [params] { return run_collective(*params, std::cout); }};
}

}  // namespace shardplan
