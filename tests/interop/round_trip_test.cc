// Emit then read back gives the same plan, for each format, over configurations each stack
// can express: the model (the zoo's, by name), the GPUs and every resolved config field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "models/error.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"

namespace shardplan {
namespace {

struct Case {
  std::string name;
  StackFormat format;
  std::string model;
  int64_t gpus;
  nlohmann::json config;
};

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("shardplan_round_trip_" + name);
  std::ofstream(path) << text;
  return path.string();
}

Job job_of(const Case& c) {
  JobParams p;
  p.model = c.model;
  p.cluster = "dgx-h100";
  p.gpus = c.gpus;
  p.config_json = c.config;
  return load_job(p);
}

Job read_back(const Case& c, const std::string& file) {
  JobParams p;
  p.cluster = "dgx-h100";
  switch (c.format) {
    case StackFormat::megatron_args:
      p.from_megatron = file;  // the launcher line gives the GPUs
      break;
    case StackFormat::megatron_bridge:
      p.from_megatron_bridge = file;
      p.gpus = c.gpus;  // Bridge's config does not hold the world size
      break;
    case StackFormat::torchtitan:
      p.from_torchtitan = file;  // the explicit degrees give the GPUs
      break;
  }
  return load_job(p);
}

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, EmitThenReadGivesTheSamePlan) {
  const Case& c = GetParam();
  const Job original = job_of(c);
  const std::string text =
      emit_stack_config(c.format, original.model, original.cluster, original.config);
  const Job back = read_back(c, write_temp(c.name, text));
  EXPECT_EQ(back.model.name, original.model.name) << text;
  EXPECT_EQ(back.cluster.num_gpus, original.cluster.num_gpus) << text;
  EXPECT_EQ(fsdp_config_to_json(back.config).dump(1), fsdp_config_to_json(original.config).dump(1))
      << text;
  const Plan a = build_plan(original.model, original.cluster, original.config);
  const Plan b = build_plan(back.model, back.cluster, back.config);
  EXPECT_TRUE(plan_to_json(a) == plan_to_json(b)) << "the plans differ";
  ASSERT_TRUE(back.stack.has_value());
  EXPECT_TRUE(back.stack->unknown.empty()) << text;
}

const nlohmann::json kTorchEager = {{"stack", "torch-eager"}, {"allocator", "expandable"}};

nlohmann::json with(nlohmann::json base, const nlohmann::json& more) {
  base.update(more);
  return base;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const StackFormat f : {StackFormat::megatron_args, StackFormat::megatron_bridge}) {
    const std::string n = f == StackFormat::megatron_args ? "megatron_args" : "megatron_bridge";
    out.push_back({n + "_default", f, "llama3-8b", 8, nlohmann::json::object()});
    out.push_back({n + "_70b_tp8_sp_full",
                   f,
                   "llama3-70b",
                   64,
                   {{"tp", 8}, {"recompute", "full"}, {"micro_batch", 2}, {"grad_accum", 4}}});
    out.push_back({n + "_hsdp_outer_optim_cp2",
                   f,
                   "llama3-8b",
                   32,
                   {{"dp_outer", 2},
                    {"outer_strategy", "optim"},
                    {"cp", 2},
                    {"cp_comm", "a2a"},
                    {"seq_len", 16384}}});
    out.push_back({n + "_fp8_mx_gather_double_buffer",
                   f,
                   "llama3-8b",
                   16,
                   {{"fp8_param_gather", true},
                    {"fp8_recipe", "mxfp8"},
                    {"double_buffer", true},
                    {"recompute", "selective"},
                    {"main_param_dtype", "bf16"}}});
    out.push_back({n + "_zero1_no_overlap_fp32_grads",
                   f,
                   "llama3-8b",
                   8,
                   {{"sharding_strategy", "optim"},
                    {"async_reduce", false},
                    {"forward_prefetch", 0},
                    {"backward_prefetch", 0},
                    {"main_grad_dtype", "fp32"},
                    {"grad_reduce_dtype", "fp32"},
                    {"offload_activations", 4},
                    {"allocator", "expandable"}}});
    out.push_back({n + "_qwen3_moe_ep8_alltoall",
                   f,
                   "qwen3-30b-a3b",
                   16,
                   {{"ep", 8}, {"moe_dispatcher", "alltoall"}, {"moe_capacity_factor", 1.25}}});
    out.push_back({n + "_qwen3_moe_recompute_modules",
                   f,
                   "qwen3-30b-a3b",
                   8,
                   {{"ep", 8},
                    {"moe_dispatcher", "alltoall"},
                    {"recompute", "selective"},
                    {"recompute_modules", {"core_attn", "layernorm", "moe_act"}}}});
    // Under FP8 the per-tensor recipe is written as tensorwise: Megatron refuses layernorm
    // and moe_act recompute under delayed scaling.
    out.push_back({n + "_qwen3_moe_fp8_recompute_modules",
                   f,
                   "qwen3-30b-a3b",
                   8,
                   {{"ep", 8},
                    {"moe_dispatcher", "alltoall"},
                    {"sharding_strategy", "optim"},
                    {"fp8", true},
                    {"recompute", "selective"},
                    {"recompute_modules", {"layernorm", "moe_act"}}}});
    out.push_back({n + "_qwen3_moe_cuda_graphs",
                   f,
                   "qwen3-30b-a3b",
                   8,
                   {{"ep", 8},
                    {"moe_dispatcher", "alltoall"},
                    {"cuda_graphs", {"attn", "moe_router", "moe_preprocess"}}}});
    out.push_back({n + "_llama_full_iteration_graph",
                   f,
                   "llama3-8b",
                   8,
                   {{"sharding_strategy", "optim"}, {"cuda_graphs", {"full_iteration"}}}});
    out.push_back({n + "_deepseek16b_ep8_hybridep",
                   f,
                   "deepseek-v3-16b",
                   8,
                   {{"ep", 8}, {"moe_dispatcher", "hybridep"}}});
    out.push_back({n + "_llama2_mha_tp4_overlap",
                   f,
                   "llama2-7b",
                   64,
                   {{"tp", 4}, {"tp_comm_overlap", true}, {"seq_len", 4096}}});
  }
  const StackFormat t = StackFormat::torchtitan;
  out.push_back(
      {"torchtitan_8b_sac_op", t, "llama3-8b", 8, with(kTorchEager, {{"recompute", "sac_op"}})});
  out.push_back({"torchtitan_70b_tp8_compile_float8", t, "llama3-70b", 64,
                 with(kTorchEager, {{"stack", "torch-compile"},
                                    {"tp", 8},
                                    {"tp_comm_overlap", true},
                                    {"recompute", "full"},
                                    {"fp8_param_gather", true},
                                    {"micro_batch", 2},
                                    {"grad_accum", 2}})});
  out.push_back({"torchtitan_ddp", t, "llama3-8b", 8,
                 with(kTorchEager, {{"sharding_strategy", "no_shard"}, {"recompute", "full"}})});
  out.push_back({"torchtitan_no_reshard_sac_layer3", t, "llama3-8b", 8,
                 with(kTorchEager, {{"sharding_strategy", "optim_grads"},
                                    {"recompute", "sac_layer"},
                                    {"recompute_every", 3}})});
  out.push_back({"torchtitan_hsdp_cp2_bf16", t, "llama3-8b", 32,
                 with(kTorchEager, {{"dp_outer", 2},
                                    {"cp", 2},
                                    {"cp_comm", "all_gather"},
                                    {"seq_len", 16384},
                                    {"main_param_dtype", "bf16"},
                                    {"recompute", "none"}})});
  out.push_back({"torchtitan_deepseek16b_ep8_deepep", t, "deepseek-v3-16b", 8,
                 with(kTorchEager, {{"ep", 8}, {"etp", 1}, {"moe_dispatcher", "deepep"}})});
  out.push_back({"torchtitan_compile_eager_loss", t, "llama3-8b", 8,
                 with(kTorchEager, {{"stack", "torch-compile"}, {"loss_kernel", "upcast"}})});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// An empty recompute_modules list re-runs nothing: Megatron's command line cannot write
// one (one or more values), so the text carries no recompute flags and says why.
TEST(Emit, EmptyRecomputeModulesIsNoRecompute) {
  Case c{"x",
         StackFormat::megatron_args,
         "llama3-8b",
         8,
         {{"recompute", "selective"}, {"recompute_modules", nlohmann::json::array()}}};
  const Job job = job_of(c);
  const std::string args =
      emit_stack_config(StackFormat::megatron_args, job.model, job.cluster, job.config);
  EXPECT_EQ(args.find("--recompute"), std::string::npos) << args;
  EXPECT_NE(args.find("recompute_modules []: nothing re-runs"), std::string::npos) << args;
}

// What the stack cannot express is said in the text, not dropped.
TEST(Emit, SaysWhatTheStackCannotExpress) {
  Case c{"x",
         StackFormat::megatron_args,
         "llama3-8b",
         8,
         {{"forward_prefetch", 2},
          {"backward_prefetch", 2},
          {"bucket_bytes", 100000000},
          {"stack", "torch-eager"},
          {"recompute", "sac_op"}}};
  const Job job = job_of(c);
  const std::string args =
      emit_stack_config(StackFormat::megatron_args, job.model, job.cluster, job.config);
  for (const char* expected : {"# prefetch 2/2", "# bucket_bytes 100000000",
                               "planned on stack torch-eager", "# recompute sac_op"}) {
    EXPECT_NE(args.find(expected), std::string::npos) << expected << "\n" << args;
  }
  const std::string toml =
      emit_stack_config(StackFormat::torchtitan, job.model, job.cluster, job.config);
  EXPECT_NE(toml.find("# prefetch 2/2"), std::string::npos) << toml;
  EXPECT_NE(toml.find("# bucket_bytes"), std::string::npos) << toml;
}

// Megatron pads GPT-3's 50,257-token vocabulary to 50,304 rows (a multiple of 128): the text
// says so, and reading it back gives Megatron's model, not the zoo's.
TEST(Emit, MegatronPadsTheVocabulary) {
  const Job job = job_of({"x",
                          StackFormat::megatron_args,
                          "gpt3-175b",
                          64,
                          {{"tp", 8}, {"seq_len", 2048}, {"recompute", "full"}}});
  const std::string text =
      emit_stack_config(StackFormat::megatron_args, job.model, job.cluster, job.config);
  EXPECT_NE(text.find("--vocab-size 50257  # Megatron pads it to 50304 rows"), std::string::npos)
      << text;
  EXPECT_NE(text.find("--position-embedding-type learned_absolute"), std::string::npos) << text;
  EXPECT_EQ(text.find("--hidden-dropout"), std::string::npos) << text;  // GPT-3 keeps dropout
  JobParams p;
  p.from_megatron = write_temp("gpt3", text);
  p.cluster = "dgx-h100";
  const Job back = load_job(p);
  EXPECT_EQ(back.model.vocab_size, 50304);
  EXPECT_EQ(fsdp_config_to_json(back.config), fsdp_config_to_json(job.config));
}

TEST(Emit, TorchtitanNeedsOneOfItsFlavours) {
  const Job job = job_of({"x", StackFormat::torchtitan, "mpt-7b", 8, {{"seq_len", 2048}}});
  try {
    emit_stack_config(StackFormat::torchtitan, job.model, job.cluster, job.config);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "model");
    EXPECT_NE(e.reason().find("llama3 8B"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardplan
