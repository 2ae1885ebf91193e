#include "planner/rank_model.h"

#include <algorithm>
#include <deque>
#include <mutex>

namespace shardplan {
namespace {

// parallel_model reads the architecture, the name and the source only. The key holds the
// architecture itself, so its address cannot be reused while the entry lives.
struct Split {
  std::shared_ptr<const TransformerArch> arch;
  std::string name, source;
  ModelParallel parallel;
  std::shared_ptr<const ModelSpec> model;

  bool matches(const ModelSpec& whole, const ModelParallel& p) const {
    return arch == whole.arch && name == whole.name && source == whole.source && parallel == p;
  }
};

// A sweep's default space has 12 meshes; a few more cover several models at once. Each
// split of a 405B model is a few megabytes.
constexpr std::size_t kKeptSplits = 32;

std::shared_ptr<const ModelSpec> split(const ModelSpec& whole, const ModelParallel& p) {
  static std::mutex mutex;
  static std::deque<Split> kept;  // most recently used first
  {
    std::lock_guard lock(mutex);
    const auto it =
        std::find_if(kept.begin(), kept.end(), [&](const Split& s) { return s.matches(whole, p); });
    if (it != kept.end()) {
      Split found = *it;
      kept.erase(it);
      kept.push_front(found);
      return found.model;
    }
  }
  // Built outside the lock: two threads may build the same split once each.
  auto model = std::make_shared<const ModelSpec>(parallel_model(whole, p));
  std::lock_guard lock(mutex);
  kept.push_front({whole.arch, whole.name, whole.source, p, model});
  if (kept.size() > kKeptSplits) kept.pop_back();
  return model;
}

}  // namespace

RankModel::RankModel(const ModelSpec& whole, const FsdpConfig& config) : whole_(&whole) {
  const ModelParallel p = model_parallel(config);
  if (!p.trivial()) own_ = split(whole, p);
}

}  // namespace shardplan
