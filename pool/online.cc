#include "pool/placement.h"
#include "pool/pool.h"

namespace shardplan {
namespace {

class OnlineAssigner final : public OffsetAssigner {
 public:
  std::string_view name() const override { return "online"; }

  PoolAssignment assign(const std::vector<PoolRequest>& requests,
                        const PackOptions& options) const override {
    // No search, so no claim of optimality: the lower bound (a sweep of its own) is
    // not computed.
    return pool::with_status(requests, pool::place_online(requests, options.alignment), -1,
                             options);
  }
};

}  // namespace

std::unique_ptr<OffsetAssigner> make_online_assigner() {
  return std::make_unique<OnlineAssigner>();
}

}  // namespace shardplan
