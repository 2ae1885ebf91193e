#include "cli/job.h"

#include "models/zoo.h"

namespace shardplan {

Job load_job(const JobParams& p, const std::vector<std::string>& extra_overrides) {
  ModelSpec model = load_model(p.model);
  ClusterSpec cluster = load_cluster(p.cluster, p.nodes, p.gpus);
  std::vector<std::string> overrides = p.overrides;
  overrides.insert(overrides.end(), extra_overrides.begin(), extra_overrides.end());
  const FsdpConfig config = load_fsdp_config(p.config_file, overrides);
  FsdpConfig resolved =
      resolve_fsdp_config(config, model, cluster, fsdp_config_label(p.config_file, overrides));
  return Job{std::move(model), std::move(cluster), std::move(resolved)};
}

}  // namespace shardplan
