// MiniMalloc CSV -> every packing algorithm with a node budget; each placement must pass
// check_packing and no pool may be below the lower bound.
#include "fuzz_support.h"
#include "pool/csv.h"
#include "pool/pool.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const PoolTable table = parse_pool_csv(fuzz::text(data, size), "fuzz.csv");
    // Past a few hundred buffers the parse is what is fuzzed; the search gets a node
    // budget and a short clock so that each input takes milliseconds.
    if (table.requests.size() > 300) return;
    const int64_t bound = live_bytes_lower_bound(table.requests, 1);
    for (const std::string& name : offset_assigner_names()) {
      const auto assigner = make_offset_assigner(name);
      const PoolAssignment result = assigner->assign(
          table.requests, {.alignment = 1, .time_limit_seconds = 0.02, .node_limit = 2000});
      if (result.status != PackStatus::solved) continue;
      fuzz::require(!check_packing(table.requests, result.offsets, result.size_bytes, 1),
                    "the placement is valid");
      fuzz::require(result.size_bytes >= bound, "no pool is below the lower bound");
    }
  });
}
