// The replay engine on the fake backend (tests/executor/fake_backend.h): every strategy
// in milliseconds, where the mpirun tests (execute_test.cc) take seconds each.
#include "executor/replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
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

// The watchdog says who can be at fault: another rank while this one waits in a
// collective (or the step's maximum over ranks), this rank alone in its own compute.
TEST(ReplayStall, TheMessageBlamesOnlyWhoCanBeAtFault) {
  const Plan plan = plan_for(2, nlohmann::json::object());
  int64_t gather = -1, forward = -1;
  for (const PlanOp& op : plan.ops) {
    if (gather < 0 && op.kind == OpKind::all_gather) gather = op.id;
    if (forward < 0 && op.kind == OpKind::forward) forward = op.id;
  }
  ASSERT_GE(gather, 0);
  ASSERT_GE(forward, 0);
  const std::string collective = describe_stall(plan, 1, gather);
  EXPECT_NE(collective.find("(a collective over 'dp_shard_cp', 2 ranks): another rank died"),
            std::string::npos)
      << collective;
  const std::string compute = describe_stall(plan, 1, forward);
  EXPECT_NE(compute.find("'" + plan.ops[static_cast<std::size_t>(forward)].name +
                         "' (this rank's own forward op"),
            std::string::npos)
      << compute;
  EXPECT_EQ(compute.find("another rank"), std::string::npos) << compute;
  EXPECT_NE(describe_stall(plan, 0, -1).find("step 0's start or end"), std::string::npos);
  EXPECT_NE(describe_stall(plan, -1, kSetupCommunicators).find("another rank"), std::string::npos);
  EXPECT_EQ(describe_stall(plan, -1, kSetupBuffers).find("another rank"), std::string::npos);
}

// A compute op that runs past the timeout ends the job naming it as this rank's own slow
// op (it used to blame "another rank").
TEST(ReplayStall, ASlowComputeOpIsNamedAsThisRanksOwn) {
  const Plan plan = plan_for(2, nlohmann::json::object());
  EXPECT_EXIT(
      {
        FakeBackend backend(2);
        backend.on_run = [](const PlanOp& op) {
          if (op.kind == OpKind::backward) ::usleep(2'000'000);
        };
        replay(plan, backend, {.warmup = 0, .steps = 1, .timeout_seconds = 0.1});
        std::exit(0);
      },
      ::testing::ExitedWithCode(124),
      "rank 0 of 2: no progress for [0-9.]+ s while running step 0, op [0-9]+ 'bwd [^']*' "
      "\\(this rank's own backward op");
}

// A backend's own limits are checked with the plan, before anything is allocated.
TEST(ReplayErrors, TheBackendsOwnLimitsAreCheckedFirst) {
  class Refusing final : public ExecutorBackend {
   public:
    std::string_view name() const override { return "refusing"; }
    int rank() const override { return 0; }
    int world_size() const override { return 2; }
    void prepare(const Plan&) override { ADD_FAILURE() << "prepared"; }
    std::byte* allocate(int64_t) override {
      ADD_FAILURE() << "allocated";
      return nullptr;
    }
    void release(std::byte*) override {}
    void initialise(const std::vector<BufferSpan>&) override {}
    void run(const PlanOp&, const std::vector<BufferSpan>&,
             const std::vector<BufferSpan>&) override {}
    void begin_step(int) override {}
    double now() override { return 0; }
    double max_over_ranks(double seconds) override { return seconds; }
    void check_plan(const Plan&) const override {
      throw InputError("plan", "/ops", "beyond this backend");
    }
  } backend;
  EXPECT_THROW(replay(plan_for(2, nlohmann::json::object()), backend, {}), InputError);
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
