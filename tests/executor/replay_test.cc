// The replay engine on the fake backend (tests/executor/fake_backend.h): every strategy
// in milliseconds, where the mpirun tests (execute_test.cc) take seconds each.
#include "executor/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "tests/executor/fake_backend.h"

namespace shardplan::testing {
namespace {

Plan plan_for(int64_t gpus, const nlohmann::json& extra) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, gpus);
  nlohmann::json j = extra;
  j["seq_len"] = 64;
  return build_plan(model, cluster,
                    resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg"));
}

struct Config {
  int64_t gpus;
  nlohmann::json settings;
};

class Replay : public ::testing::TestWithParam<Config> {};

// Every op runs once a step, after its dependencies and after the op before it on its
// stream; no transient buffer is read before it is written or after another overwrote
// it; the pool and each persistent buffer are allocated once and all released; the
// measured step is the virtual time the ops took.
TEST_P(Replay, RunsEveryOpInAValidOrderOnItsPlannedBytes) {
  const Plan plan = plan_for(GetParam().gpus, GetParam().settings);
  FakeBackend backend(static_cast<int>(plan.num_gpus));
  const ReplayOptions options{.warmup = 1, .steps = 2, .check = true};
  const Timeline t = replay(plan, backend, options);

  ASSERT_EQ(backend.ran.size(), 3 * plan.ops.size());
  std::map<int, std::vector<int64_t>> position;  // step -> position of each op
  for (std::size_t i = 0; i < backend.ran.size(); ++i) {
    auto& p = position[backend.ran[i].step];
    p.resize(plan.ops.size(), -1);
    EXPECT_EQ(p[static_cast<std::size_t>(backend.ran[i].op)], -1) << "an op ran twice in a step";
    p[static_cast<std::size_t>(backend.ran[i].op)] = static_cast<int64_t>(i);
  }
  for (const auto& [step, p] : position) {
    std::map<Stream, int64_t> last_on_stream;
    for (const PlanOp& op : plan.ops) {
      for (int64_t d : op.deps)
        EXPECT_LT(p[static_cast<std::size_t>(d)], p[static_cast<std::size_t>(op.id)]) << op.name;
      if (auto it = last_on_stream.find(op.stream); it != last_on_stream.end()) {
        EXPECT_LT(p[static_cast<std::size_t>(it->second)], p[static_cast<std::size_t>(op.id)])
            << "stream order broken at " << op.name;
      }
      last_on_stream[op.stream] = op.id;
    }
  }

  std::size_t persistent = 0;
  for (const PlanBuffer& b : plan.buffers) persistent += b.persistent ? 1 : 0;
  ASSERT_EQ(backend.allocations.size(), 1 + persistent);
  EXPECT_EQ(backend.allocations[0].bytes, std::max<int64_t>(plan.pool.size_bytes, 1));
  EXPECT_EQ(backend.initialised, persistent);
  for (const auto& a : backend.allocations) EXPECT_TRUE(a.released);

  double step = 0;
  for (const PlanOp& op : plan.ops) step += FakeBackend::op_seconds(op);
  EXPECT_NEAR(t.summary.step_seconds, step, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, Replay,
    ::testing::Values(
        Config{2, {{"sharding_strategy", "no_shard"}}}, Config{2, {{"sharding_strategy", "optim"}}},
        Config{2, {{"sharding_strategy", "optim_grads"}, {"grad_accum", 2}}},
        Config{2, {{"sharding_strategy", "optim_grads_params"}}}, Config{4, {{"dp_outer", 2}}},
        Config{4, {{"dp_outer", 2}, {"outer_strategy", "optim"}}},
        Config{4, {{"forward_prefetch", 0}, {"backward_prefetch", 0}, {"recompute", "full"}}},
        Config{4, {{"forward_prefetch", 2}, {"backward_prefetch", 2}, {"grad_accum", 3}}},
        Config{2, {{"async_reduce", false}, {"recompute", "selective"}}},
        Config{2, {{"double_buffer", true}}},
        Config{2, {{"bucket_bytes", 20000}, {"allocator", "pool"}}}));

// A reduction that no longer waits for the backward that writes its input reads the
// gradient buffer before anything wrote it: the engine's order shows the missing edge.
TEST(ReplayErrors, AMissingDependencyShowsAsAReadBeforeAWrite) {
  Plan plan = plan_for(2, nlohmann::json::object());
  std::string name;
  for (PlanOp& op : plan.ops) {
    if (op.name.rfind("rs ", 0) == 0) {
      op.deps.clear();
      name = op.name;
      break;
    }
  }
  ASSERT_FALSE(name.empty());
  FakeBackend backend(2);
  try {
    replay(plan, backend, {.warmup = 0, .steps = 1});
    FAIL() << "the replay ran a plan with a missing dependency";
  } catch (const IntegrityError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("before anything wrote it"), std::string::npos);
  }
  for (const auto& a : backend.allocations) EXPECT_TRUE(a.released) << "released on the error path";
}

TEST(ReplayErrors, AWorldOfTheWrongSizeIsRefusedBeforeAnythingRuns) {
  const Plan plan = plan_for(2, nlohmann::json::object());
  FakeBackend backend(3);
  EXPECT_THROW(replay(plan, backend, {}), InputError);
  EXPECT_TRUE(backend.ran.empty());
  EXPECT_TRUE(backend.allocations.empty());
}

}  // namespace
}  // namespace shardplan::testing
