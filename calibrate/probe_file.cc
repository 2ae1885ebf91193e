#include <fmt/format.h>

#include "calibrate/calibrate.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/suggest.h"

namespace shardplan {

std::vector<CollectiveSample> read_probe_collectives(const std::string& path) {
  const nlohmann::json json = read_json_file(path);  // JsonReader keeps a pointer to it
  const JsonReader r(json, path);
  r.expect_only(
      {"probe_version", "backend", "device", "ranks", "ranks_per_node", "collectives", "kernels"});
  const int64_t version = r.integer("probe_version");
  if (version != 1) {
    r.fail("probe_version", fmt::format("this shardplan reads version 1, got {}", version));
  }
  std::vector<CollectiveSample> samples;
  const std::vector<JsonReader> groups = r.objects("collectives");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const JsonReader& c = groups[g];
    c.expect_only({"op", "group", "ranks", "ranks_per_node", "rows"});
    const std::string name = c.string("op");
    const std::optional<Collective> op = parse_collective(name);
    if (!op) c.fail("op", unknown_name_message("collective", name, collective_names()));
    const RankLayout layout{.ranks = c.integer_in("ranks", 2, limits::kMaxGpus),
                            .ranks_per_node = c.integer_in("ranks_per_node", 1, limits::kMaxGpus)};
    const std::vector<JsonReader> rows = c.objects("rows");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      rows[i].expect_only({"bytes", "seconds"});
      samples.push_back({.op = *op,
                         .layout = layout,
                         .bytes = rows[i].number_in("bytes", 1, 0x1p50),
                         .seconds = rows[i].number_in("seconds", 1e-9, 3600),
                         .where = fmt::format("{}: /collectives/{}/rows/{}", path, g, i)});
    }
  }
  if (samples.empty()) r.fail("collectives", "no measured collectives to fit");
  return samples;
}

}  // namespace shardplan
