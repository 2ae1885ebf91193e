// The validator catches broken plans, and plan.json round-trips.
#include "planner/plan_validator.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "models/error.h"
#include "models/limits.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "tests/expect_input_error.h"
#include "tests/planner/tiny_plan.h"

namespace shardplan {
namespace {

// Two micro-batches, so the checks see reductions across them.
Plan tiny_plan(const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = extra;
  j["grad_accum"] = 2;
  return testing::tiny_plan(j);
}

PlanErrorKind error_kind(const Plan& plan) {
  const auto error = validate_plan(plan);
  EXPECT_TRUE(error.has_value()) << "the broken plan validated";
  return error ? error->kind : PlanErrorKind::size_mismatch;
}

const PlanBuffer* find_buffer(const Plan& plan, const std::string& name) {
  for (const PlanBuffer& b : plan.buffers) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

TEST(PlanValidator, AcceptsWhatThePlannerBuilds) {
  const Plan plan = tiny_plan();
  EXPECT_FALSE(validate_plan(plan).has_value());
}

TEST(PlanValidator, TwoLiveBuffersOverlapping) {
  Plan plan = tiny_plan();
  // Two buffers live at the same op: the forward activations of layers.0 and layers.1.
  const PlanBuffer* a = find_buffer(plan, "activations layers.0 mb0");
  const PlanBuffer* b = find_buffer(plan, "activations layers.1 mb0");
  ASSERT_TRUE(a && b);
  ASSERT_LT(b->live_begin, a->live_end);
  plan.buffers[static_cast<std::size_t>(b->id)].offset = a->offset;
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::overlapping_buffers);
  EXPECT_NE(error->message.find("activations layers.0 mb0"), std::string::npos) << error->message;
}

TEST(PlanValidator, RemovedDependencyLetsAReduceScatterBeFreedUnwaited) {
  Plan plan = tiny_plan();
  // Remove every wait on the reduce-scatter of layers.1 mb0: its gradient buffer would be
  // freed while the rs stream may still read it.
  int64_t rs = -1;
  for (const PlanOp& op : plan.ops) {
    if (op.name == "rs layers.1 mb0") rs = op.id;
  }
  ASSERT_GE(rs, 0);
  for (PlanOp& op : plan.ops)
    op.deps.erase(std::remove(op.deps.begin(), op.deps.end(), rs), op.deps.end());
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::unwaited_async_use);
  EXPECT_NE(error->message.find("rs layers.1 mb0"), std::string::npos) << error->message;
}

TEST(PlanValidator, DependencyForwardInTime) {
  Plan plan = tiny_plan();
  plan.ops[3].deps.push_back(10);
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_dependency);
}

TEST(PlanValidator, BufferUsedOutsideItsInterval) {
  Plan plan = tiny_plan();
  PlanBuffer& b =
      plan.buffers[static_cast<std::size_t>(find_buffer(plan, "activations layers.0 mb0")->id)];
  b.live_end = b.live_begin + 1;  // the backward still reads it
  EXPECT_EQ(error_kind(plan), PlanErrorKind::buffer_not_live);
}

TEST(PlanValidator, MisalignedAndOutsideThePool) {
  Plan plan = tiny_plan();
  const int64_t id = find_buffer(plan, "activations layers.0 mb0")->id;
  plan.buffers[static_cast<std::size_t>(id)].offset += 8;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::misaligned_offset);
  plan = tiny_plan();
  plan.buffers[static_cast<std::size_t>(id)].offset = plan.pool.size_bytes;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::outside_pool);
}

TEST(PlanValidator, SizesThatDoNotAddUp) {
  Plan plan = tiny_plan();
  plan.pool.lower_bound_bytes = plan.pool.size_bytes + 1;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::size_mismatch);
  plan = tiny_plan();
  plan.groups[1].elements += 1;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::size_mismatch);
}

TEST(PlanValidator, ProcessGroupsThatDoNotTileOrAreNotNamed) {
  Plan plan = tiny_plan();
  const auto shard = static_cast<std::size_t>(find_process_group(plan, "dp_shard_cp"));
  const auto outer = static_cast<std::size_t>(find_process_group(plan, "dp_outer"));
  plan.process_groups[outer].stride = 3;  // dp_outer: 1 rank 3 apart does not tile 4 GPUs
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
  plan = tiny_plan();
  plan.process_groups[shard].name = "shard";
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
  // A mesh group whose size is not the config's.
  plan = tiny_plan();
  plan.process_groups[static_cast<std::size_t>(find_process_group(plan, "tp"))].size = 2;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
  // Groups that tile the GPUs but whose mesh is not all of them.
  plan = tiny_plan();
  plan.num_gpus = 8;
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::bad_process_group);
  EXPECT_NE(error->message.find("is not the plan's 8 GPUs"), std::string::npos) << error->message;
  for (const int64_t group : {int64_t{-1}, int64_t{7}}) {
    plan = tiny_plan();
    for (PlanOp& op : plan.ops) {
      if (op.kind == OpKind::all_gather) {
        op.group = group;  // a collective over no group
        break;
      }
    }
    EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group) << group;
  }
  plan = tiny_plan();
  for (PlanOp& op : plan.ops) {
    if (op.kind == OpKind::forward) {
      op.group = 0;  // compute runs over no group
      break;
    }
  }
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
  plan = tiny_plan();
  plan.buffers[0].shard_group = 5;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
}

// The first op of `kind`.
PlanOp& first_op(Plan& plan, OpKind kind) {
  for (PlanOp& op : plan.ops)
    if (op.kind == kind) return op;
  ADD_FAILURE() << "no " << op_kind_name(kind) << " op";
  return plan.ops.front();
}

// The first transient (or persistent) buffer.
PlanBuffer& first_buffer(Plan& plan, bool persistent) {
  for (PlanBuffer& b : plan.buffers)
    if (b.persistent == persistent) return b;
  ADD_FAILURE() << "no such buffer";
  return plan.buffers.front();
}

// 2^63 - 1 bytes passed as a buffer's size (its offset plus size wrapped negative), and
// an offset near 2^63 wrapped past the pool's end.
TEST(PlanValidator, SizesAndOffsetsCannotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const bool persistent : {false, true}) {
    Plan plan = tiny_plan();
    first_buffer(plan, persistent).bytes = kMax;
    const auto error = validate_plan(plan);
    ASSERT_TRUE(error.has_value()) << persistent;
    EXPECT_EQ(error->kind, PlanErrorKind::out_of_range);
    EXPECT_NE(error->message.find("9223372036854775807 bytes, outside [0, 17592186044416]"),
              std::string::npos)
        << error->message;
  }
  Plan plan = tiny_plan();
  first_buffer(plan, false).offset = kMax / 256 * 256;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::outside_pool);
  // Persistent buffers within one GPU's memory each, but more than it together.
  plan = tiny_plan();
  for (PlanBuffer& b : plan.buffers)
    if (b.persistent) b.bytes = limits::kMaxGpuMemoryBytes / 2;
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::out_of_range);
  EXPECT_NE(error->message.find("one rank holds more than"), std::string::npos) << error->message;
}

TEST(PlanValidator, CapacityIsOneGpusMemory) {
  for (const int64_t capacity : {int64_t{-1}, int64_t{0}, int64_t{1} << 50}) {
    Plan plan = tiny_plan();
    plan.capacity_bytes = capacity;
    EXPECT_EQ(error_kind(plan), PlanErrorKind::out_of_range) << capacity;
  }
  Plan plan = tiny_plan();
  plan.non_tensor_bytes = plan.capacity_bytes;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::out_of_range);
  plan = tiny_plan();
  plan.pool.alignment_bytes = 0;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::out_of_range);
}

// Every index a plan holds names something that exists: an op naming segment 999 made
// the executor read past the segments (SIGSEGV).
TEST(PlanValidator, EveryReferenceIsRangeChecked) {
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> breaks = {
      {"op segment 999", [](Plan& p) { first_op(p, OpKind::forward).segment = 999; }},
      {"op unit 999", [](Plan& p) { first_op(p, OpKind::all_gather).unit = 999; }},
      {"op micro-batch past grad_accum",
       [](Plan& p) { first_op(p, OpKind::forward).micro_batch = 2; }},
      {"op micro-batch -2", [](Plan& p) { first_op(p, OpKind::backward).micro_batch = -2; }},
      {"buffer unit -2", [](Plan& p) { p.buffers[0].unit = -2; }},
      {"buffer group 999", [](Plan& p) { p.buffers[0].group = 999; }},
      {"buffer micro-batch 7", [](Plan& p) { first_buffer(p, false).micro_batch = 7; }},
      {"group unit 99", [](Plan& p) { p.groups[0].unit = 99; }},
      {"segment unit 99", [](Plan& p) { p.segments[0].unit = 99; }},
      {"unit lists another unit's group", [](Plan& p) { p.units[0].groups = p.units[1].groups; }},
      {"unit lists group 999", [](Plan& p) { p.units[0].groups.push_back(999); }},
      {"unit id not its index", [](Plan& p) { p.units[1].id = 5; }},
      {"segment id not its index", [](Plan& p) { p.segments[1].id = 0; }},
      {"stream 8", [](Plan& p) { p.ops[0].stream = static_cast<Stream>(kNumStreams); }},
  };
  for (const auto& [what, mutate] : breaks) {
    Plan plan = tiny_plan();
    mutate(plan);
    const auto error = validate_plan(plan);
    ASSERT_TRUE(error.has_value()) << what;
    EXPECT_EQ(error->kind, PlanErrorKind::bad_reference) << what << ": " << error->message;
  }
}

// Numbers no GPU or job has: they gave MFU 9.8e295 and steps of 1e296 s.
TEST(PlanValidator, NumbersAreFiniteAndPhysical) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> breaks = {
      {"op flops NaN", [&](Plan& p) { first_op(p, OpKind::optimizer_step).flops = nan; }},
      {"op bytes inf", [&](Plan& p) { first_op(p, OpKind::optimizer_step).bytes = inf; }},
      {"op bytes 1e296", [](Plan& p) { first_op(p, OpKind::all_gather).bytes = 1e296; }},
      {"op bytes -1", [](Plan& p) { first_op(p, OpKind::all_gather).bytes = -1; }},
      {"segment flops 1e296", [](Plan& p) { p.segments[1].forward_flops = 1e296; }},
      {"segment io_bytes -1", [](Plan& p) { p.segments[1].io_bytes = -1; }},
      {"segment activations 2^62", [](Plan& p) { p.segments[1].activation_bytes = 0x1p62; }},
      {"model_flops 9.8e295", [](Plan& p) { p.model_flops = 9.8e295; }},
      {"num_gpus 2^40", [](Plan& p) { p.num_gpus = int64_t{1} << 40; }},
  };
  for (const auto& [what, mutate] : breaks) {
    Plan plan = tiny_plan();
    mutate(plan);
    const auto error = validate_plan(plan);
    ASSERT_TRUE(error.has_value()) << what;
    EXPECT_EQ(error->kind, PlanErrorKind::out_of_range) << what << ": " << error->message;
  }
}

// An op's work is its kind's: what it computes is its segment's, a collective moves at
// most its buffers, the model's FLOPs are at most what the ops run.
TEST(PlanValidator, OpsDoTheirKindsWork) {
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> breaks = {
      {"forward flops not its segment's",
       [](Plan& p) { first_op(p, OpKind::forward).flops += 1e9; }},
      {"backward bytes below its segment's",
       [](Plan& p) { first_op(p, OpKind::backward).bytes = 0; }},
      {"forward on the ag stream",
       [](Plan& p) { first_op(p, OpKind::forward).stream = Stream::ag; }},
      {"forward without a segment", [](Plan& p) { first_op(p, OpKind::forward).segment = -1; }},
      {"all-gather moving 1000x its buffers",
       [](Plan& p) { first_op(p, OpKind::all_gather).bytes *= 1000; }},
  };
  for (const auto& [what, mutate] : breaks) {
    Plan plan = tiny_plan();
    mutate(plan);
    const auto error = validate_plan(plan);
    ASSERT_TRUE(error.has_value()) << what;
    EXPECT_EQ(error->kind, PlanErrorKind::inconsistent_op) << what << ": " << error->message;
  }
  Plan plan = tiny_plan();
  plan.tokens_per_gpu *= 1e6;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::size_mismatch);
  plan = tiny_plan();
  plan.model_flops *= 7;
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::size_mismatch);
  EXPECT_NE(error->message.find("model_flops"), std::string::npos) << error->message;
}

// Matmuls are part of their segment's forward FLOPs and each fits one GPU: [10^6]^3 ran
// the CPU executor into its watchdog, [2^40]^3 ended in bad_alloc.
TEST(PlanValidator, MatmulsAreBounded) {
  const int64_t huge = int64_t{1} << 40;
  for (const auto& [shape, kind] : std::vector<std::pair<GemmShape, PlanErrorKind>>{
           {{1'000'000, 1'000'000, 1'000'000}, PlanErrorKind::size_mismatch},
           {{huge, huge, huge}, PlanErrorKind::out_of_range},
           {{int64_t{1} << 32, 1, 1}, PlanErrorKind::out_of_range},
           {{0, 8, 8}, PlanErrorKind::out_of_range}}) {
    Plan plan = tiny_plan();
    const PlanSegment& s =
        plan.segments[static_cast<std::size_t>(first_op(plan, OpKind::forward).segment)];
    plan.segments[static_cast<std::size_t>(s.id)].gemms.push_back(shape);
    EXPECT_EQ(error_kind(plan), kind) << shape.m << " " << shape.n << " " << shape.k;
  }
}

// Products of sizes read from a file are checked: 2^62 ranks 4 apart wrapped to 0.
TEST(PlanValidator, GroupAndMeshProductsCannotOverflow) {
  Plan plan = tiny_plan();
  plan.process_groups[0].size = int64_t{1} << 62;
  plan.process_groups[0].stride = 4;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
  plan = tiny_plan();
  plan.config.dp_outer = int64_t{1} << 40;
  EXPECT_EQ(error_kind(plan), PlanErrorKind::bad_process_group);
}

TEST(PlanValidator, AReloadNeedsAnEarlierOffload) {
  Plan plan = tiny_plan({{"offload_activations", 1}});
  ASSERT_FALSE(validate_plan(plan).has_value());
  PlanOp& reload = first_op(plan, OpKind::reload);
  const PlanOp& offload = first_op(plan, OpKind::offload);
  ASSERT_LT(offload.id, reload.id);
  reload.unit = offload.unit == 1 ? 2 : 1;  // a layer nothing offloaded
  const auto error = validate_plan(plan);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, PlanErrorKind::inconsistent_op);
  EXPECT_NE(error->message.find("which no earlier op offloads"), std::string::npos)
      << error->message;
}

TEST(PlanJson, RoundTrips) {
  for (const nlohmann::json& extra :
       {nlohmann::json::object(), nlohmann::json{{"sharding_strategy", "optim"}},
        nlohmann::json{{"dp_outer", 2}, {"outer_strategy", "optim"}},
        nlohmann::json{{"recompute", "full"}, {"allocator", "pool"}}}) {
    const Plan plan = tiny_plan(extra);
    const nlohmann::json written = plan_to_json(plan);
    const Plan read = plan_from_json(written, "plan.json");
    EXPECT_FALSE(validate_plan(read).has_value());
    EXPECT_EQ(plan_to_json(read), written);
    EXPECT_EQ(read.ops.size(), plan.ops.size());
  }
}

TEST(PlanJson, RejectsOtherVersionsAndBadFields) {
  nlohmann::json j = plan_to_json(tiny_plan());
  j["version"] = 99;
  testing::expect_input_error([&] { plan_from_json(j, "plan.json"); }, "/version",
                              "not the supported 5");
  // Compared as read, not narrowed to int first (2^32 + 5 became 5).
  j["version"] = (int64_t{1} << 32) + 5;
  testing::expect_input_error([&] { plan_from_json(j, "plan.json"); }, "/version",
                              "4294967301 is not the supported 5");
  j = plan_to_json(tiny_plan());
  j["ops"][3]["stream"] = "nccl";
  testing::expect_input_error([&] { plan_from_json(j, "plan.json"); }, "/ops/3/stream",
                              "unknown stream 'nccl'");
  j = plan_to_json(tiny_plan());
  j["buffers"][0]["role"] = "weights";
  testing::expect_input_error([&] { plan_from_json(j, "plan.json"); }, "/buffers/0/role",
                              "unknown buffer role");
  j = plan_to_json(tiny_plan());
  j["buffers"].back().erase("live");
  testing::expect_input_error([&] { plan_from_json(j, "plan.json"); },
                              "/buffers/" + std::to_string(j["buffers"].size() - 1) + "/live",
                              "required field is missing");
  j = plan_to_json(tiny_plan());
  for (std::size_t i = 0; i < j["ops"].size(); ++i) {
    if (j["ops"][i]["kind"] == "forward") {
      j["ops"][i]["attention_flops"] = j["ops"][i]["flops"].get<double>() * 2 + 1;
      testing::expect_input_error([&] { plan_from_json(j, "plan.json"); },
                                  "/ops/" + std::to_string(i) + "/attention_flops",
                                  "exceeds the op's flops");
      // The output layer's BF16 GEMMs are part of the op's FLOPs, beside its attention.
      j["ops"][i]["attention_flops"] = j["ops"][i]["flops"].get<double>() / 2;
      j["ops"][i]["bf16_gemm_flops"] = j["ops"][i]["flops"].get<double>() / 2 + 1;
      testing::expect_input_error([&] { plan_from_json(j, "plan.json"); },
                                  "/ops/" + std::to_string(i) + "/bf16_gemm_flops",
                                  "with attention_flops exceeds the op's flops");
      break;
    }
  }
}

TEST(StepTrace, FollowsTheTraceTheScheduleUses) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 2);
  const FsdpConfig c = resolve_fsdp_config(
      fsdp_config_from_json({{"seq_len", 32}, {"grad_accum", 2}, {"recompute", "full"}}, "cfg"),
      model, cluster, "cfg");
  const StepTrace trace = plan_step_trace(model, c);
  EXPECT_EQ(trace.modules,
            (std::vector<std::string>{"embed_tokens", "layers.0", "layers.1", "layers.2",
                                      "layers.3", "norm", "lm_head", "loss"}));
  // Per micro-batch: 8 modules × 2 forward events, 8 × 2 backward events, a recompute per
  // layer, the final callback; then the optimizer step.
  EXPECT_EQ(trace.events.size(), 2u * (16 + 16 + 4 + 1) + 1);
  EXPECT_EQ(trace.events.back().kind, StepEventKind::optimizer_step);
  // Backward runs in reverse, with the recompute inside the layer's backward.
  const auto& e = trace.events;
  EXPECT_EQ(e[16].kind, StepEventKind::pre_backward);
  EXPECT_EQ(trace.modules[static_cast<std::size_t>(e[16].module)], "loss");
  std::size_t i = 0;
  while (!(e[i].kind == StepEventKind::pre_backward && e[i].module == 4)) ++i;
  EXPECT_EQ(e[i + 1].kind, StepEventKind::recompute_forward);
  EXPECT_EQ(e[i + 2].kind, StepEventKind::post_backward);
  // The plan's compute ops follow the same order of modules.
  const Plan plan = build_plan(model, cluster, c);
  std::vector<std::string> forward;
  for (const PlanOp& op : plan.ops) {
    if (op.kind == OpKind::forward && op.micro_batch == 0) forward.push_back(op.name);
  }
  EXPECT_EQ(forward, (std::vector<std::string>{"fwd embed_tokens mb0", "fwd layers.0 mb0",
                                               "fwd layers.1 mb0", "fwd layers.2 mb0",
                                               "fwd layers.3 mb0", "fwd norm+lm_head+loss mb0"}));
}

}  // namespace
}  // namespace shardplan
