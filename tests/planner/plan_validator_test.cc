// The validator catches broken plans, and plan.json round-trips.
#include "planner/plan_validator.h"

#include <gtest/gtest.h>

#include "models/error.h"
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
