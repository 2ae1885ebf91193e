#include "planner/fsdp_config.h"

#include <gtest/gtest.h>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/sweep.h"

namespace shardplan {
namespace {

using nlohmann::json;

TEST(FsdpConfig, DefaultsFollowMegatronFsdp) {
  const FsdpConfig c = fsdp_config_from_json(json::object(), "cfg");
  EXPECT_EQ(c.sharding_strategy, ShardingStrategy::optim_grads_params);  // zero_dp_strategy=3
  EXPECT_EQ(c.outer_strategy, OuterStrategy::no_shard);
  EXPECT_EQ(c.forward_prefetch, 1);
  EXPECT_EQ(c.backward_prefetch, 1);
  EXPECT_TRUE(c.async_reduce);  // overlap_grad_reduce=True
  EXPECT_EQ(c.max_live_grad_buffers, 2);
  EXPECT_EQ(c.param_dtype, DType::bf16);
  EXPECT_EQ(c.main_param_dtype, DType::fp32);  // preserve_fp32_weights=True
  EXPECT_EQ(c.main_grad_dtype, DType::bf16);   // grad_reduce_in_fp32=False
  EXPECT_EQ(c.grad_reduce_dtype, DType::bf16);
  EXPECT_EQ(c.optimizer, Optimizer::adam);
  EXPECT_EQ(c.allocator, Allocator::caching);
  EXPECT_EQ(c.recompute, Recompute::none);
  EXPECT_FALSE(c.bucket_bytes.has_value());
  EXPECT_FALSE(c.fp8_param_gather);
  EXPECT_FALSE(c.double_buffer);
}

TEST(FsdpConfig, GradDtypesFollowTheParamDtypeUnlessSet) {
  const FsdpConfig fp16 = fsdp_config_from_json({{"param_dtype", "fp16"}}, "cfg");
  EXPECT_EQ(fp16.main_grad_dtype, DType::fp16);
  EXPECT_EQ(fp16.grad_reduce_dtype, DType::fp16);
  const FsdpConfig fp32_grads = fsdp_config_from_json({{"main_grad_dtype", "fp32"}}, "cfg");
  EXPECT_EQ(fp32_grads.grad_reduce_dtype, DType::fp32);
  // PyTorch keeps .grad in the sharded parameter's dtype, and torchtitan reduces in fp32.
  const FsdpConfig torch = fsdp_config_from_json({{"stack", "torch-compile"}}, "cfg");
  EXPECT_EQ(torch.main_grad_dtype, DType::fp32);
  EXPECT_EQ(torch.grad_reduce_dtype, DType::fp32);
  EXPECT_EQ(torch.sdpa_backend, SdpaBackend::cudnn);
  const FsdpConfig bf16_reduce =
      fsdp_config_from_json({{"stack", "torch-eager"}, {"grad_reduce_dtype", "bf16"}}, "cfg");
  EXPECT_EQ(bf16_reduce.main_grad_dtype, DType::fp32);
  EXPECT_EQ(bf16_reduce.grad_reduce_dtype, DType::bf16);
}

TEST(FsdpConfig, RoundTripsThroughJson) {
  const json in = {{"sharding_strategy", "optim_grads_params"},
                   {"dp_shard", 4},
                   {"dp_outer", 2},
                   {"tp", 2},
                   {"sequence_parallel", true},
                   {"tp_comm_overlap", true},
                   {"cp", 2},
                   {"cp_comm", "a2a"},
                   {"outer_strategy", "optim"},
                   {"unit_modules", {"layers.*"}},
                   {"bucket_bytes", 1 << 20},
                   {"forward_prefetch", 0},
                   {"backward_prefetch", 1},
                   {"async_reduce", false},
                   {"max_live_grad_buffers", 1},
                   {"recompute", "selective"},
                   {"micro_batch", 2},
                   {"grad_accum", 4},
                   {"seq_len", 4096},
                   {"param_dtype", "bf16"},
                   {"main_param_dtype", "fp32"},
                   {"main_grad_dtype", "fp32"},
                   {"grad_reduce_dtype", "fp32"},
                   {"fp8_param_gather", true},
                   {"fp8_recipe", "mxfp8"},
                   {"fine_grained_param_gather", true},
                   {"keep_fp8_transpose_cache", true},
                   {"double_buffer", true},
                   {"allocator", "pool"},
                   {"optimizer", "sgd"},
                   {"stack", "torch-eager"},
                   {"sdpa_backend", "flash"},
                   {"offload_activations", 3},
                   {"fused_rms_norm", false},
                   {"loss_kernel", "native"},
                   {"vocab_parallel_embedding", false}};
  const FsdpConfig c = fsdp_config_from_json(in, "cfg");
  EXPECT_EQ(fsdp_config_to_json(c), in);
  EXPECT_EQ(fsdp_config_to_json(fsdp_config_from_json(fsdp_config_to_json(c), "again")), in);
}

TEST(FsdpConfig, OverridesParseJsonOrFallBackToText) {
  json config = {{"micro_batch", 1}};
  apply_overrides(config, {"micro_batch=4", "recompute=full", "async_reduce=false",
                           "unit_modules=[\"layers.*\"]"});
  EXPECT_EQ(config["micro_batch"], 4);
  EXPECT_EQ(config["recompute"], "full");
  EXPECT_EQ(config["async_reduce"], false);
  EXPECT_EQ(config["unit_modules"], json::array({"layers.*"}));
}

TEST(FsdpConfig, NoSyncRoundTripsThroughJson) {
  const FsdpConfig c = fsdp_config_from_json(
      {{"stack", "torch-compile"}, {"grad_accum", 4}, {"no_sync", true}}, "cfg");
  EXPECT_TRUE(c.no_sync);
  EXPECT_EQ(c.loss_kernel, LossKernel::compiled);  // torch-compile compiles the loss too
  EXPECT_EQ(fsdp_config_from_json({{"stack", "torch-eager"}}, "cfg").loss_kernel,
            LossKernel::upcast);
  const json out = fsdp_config_to_json(c);
  EXPECT_EQ(out.at("no_sync"), true);
  EXPECT_TRUE(fsdp_config_from_json(out, "again").no_sync);
  EXPECT_FALSE(
      fsdp_config_to_json(fsdp_config_from_json(json::object(), "cfg")).contains("no_sync"));
}

// PyTorch's optimizers keep their states in the stepped parameter's dtype; Megatron's
// distributed optimizer in fp32. no_sync accumulates in reduce_dtype when it differs from
// param_dtype (FSDP2's to_accumulated_grad_if_needed), else in param_dtype.
TEST(FsdpConfig, OptimizerStateAndAccumulatorDtypes) {
  EXPECT_EQ(optimizer_state_dtype(fsdp_config_from_json({{"main_param_dtype", "bf16"}}, "c")),
            DType::fp32);
  const FsdpConfig bf16_master = fsdp_config_from_json(
      {{"stack", "torch-compile"}, {"main_param_dtype", "bf16"}, {"grad_reduce_dtype", "fp32"}},
      "c");
  EXPECT_EQ(optimizer_state_dtype(bf16_master), DType::bf16);
  EXPECT_EQ(bf16_master.main_grad_dtype, DType::bf16);
  EXPECT_EQ(accumulated_grad_dtype(bf16_master), DType::fp32);
  EXPECT_EQ(optimizer_state_dtype(fsdp_config_from_json({{"stack", "torch-eager"}}, "c")),
            DType::fp32);
  const FsdpConfig bf16_reduce =
      fsdp_config_from_json({{"stack", "torch-eager"}, {"grad_reduce_dtype", "bf16"}}, "c");
  EXPECT_EQ(accumulated_grad_dtype(bf16_reduce), DType::bf16);
}

TEST(FsdpConfig, OverrideErrors) {
  json config = json::object();
  try {
    apply_overrides(config, {"micro_bach=2"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "--set");
    EXPECT_NE(e.reason().find("did you mean 'micro_batch'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(apply_overrides(config, {"micro_batch"}), InputError);
  EXPECT_THROW(apply_overrides(config, {"=3"}), InputError);
  // Found by the config fuzz target: flags over a config that is not an object were
  // nlohmann's type_error 305 (an internal error), not an input error.
  for (json not_object : {json(4444), json::array({1, 2}), json("text")}) {
    EXPECT_THROW(apply_overrides(not_object, {"micro_batch=2"}), InputError) << not_object;
  }
}

struct BadConfig {
  const char* name;
  json config;
  const char* field;   // JSON path the error must name
  const char* reason;  // a fragment of the reason
};

class RejectsBadConfig : public ::testing::TestWithParam<BadConfig> {};

TEST_P(RejectsBadConfig, NamesTheField) {
  const BadConfig& bad = GetParam();
  try {
    fsdp_config_from_json(bad.config, "cfg.json");
    FAIL() << "accepted " << bad.config.dump();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "cfg.json");
    EXPECT_EQ(e.field(), bad.field) << e.what();
    EXPECT_NE(e.reason().find(bad.reason), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    FsdpConfig, RejectsBadConfig,
    ::testing::Values(
        BadConfig{"unknown_key",
                  {{"sharding_strategie", "optim"}},
                  "/sharding_strategie",
                  "did you mean 'sharding_strategy'"},
        BadConfig{"bad_strategy",
                  {{"sharding_strategy", "zero3"}},
                  "/sharding_strategy",
                  "unknown sharding_strategy value"},
        BadConfig{"zero_dp_shard", {{"dp_shard", 0}}, "/dp_shard", "must be positive"},
        BadConfig{
            "sdpa_on_megatron", {{"sdpa_backend", "flash"}}, "/sdpa_backend", "Transformer Engine"},
        BadConfig{"bad_sdpa",
                  {{"stack", "torch-eager"}, {"sdpa_backend", "fa3"}},
                  "/sdpa_backend",
                  "unknown sdpa_backend value"},
        BadConfig{"negative_offload", {{"offload_activations", -1}}, "/offload_activations", ""},
        BadConfig{"no_sync_on_megatron",
                  {{"no_sync", true}, {"grad_accum", 2}},
                  "/no_sync",
                  "Megatron-FSDP reduces every micro-batch"},
        BadConfig{"no_sync_zero2",
                  {{"stack", "torch-compile"},
                   {"sharding_strategy", "optim_grads"},
                   {"no_sync", true},
                   {"grad_accum", 2}},
                  "/no_sync",
                  "needs sharding_strategy optim_grads_params (got optim_grads)"},
        BadConfig{"no_sync_one_micro_batch",
                  {{"stack", "torch-compile"}, {"no_sync", true}},
                  "/no_sync",
                  "with grad_accum 1 there is nothing to defer"},
        BadConfig{"no_sync_double_buffer",
                  {{"stack", "torch-compile"},
                   {"no_sync", true},
                   {"grad_accum", 2},
                   {"double_buffer", true}},
                  "/no_sync",
                  "double_buffer"},
        BadConfig{"no_sync_not_a_bool", {{"no_sync", 1}}, "/no_sync", "expected true or false"},
        BadConfig{"replicated_embedding_without_tp",
                  {{"stack", "torch-compile"}, {"vocab_parallel_embedding", false}},
                  "/vocab_parallel_embedding",
                  "set tp > 1"},
        BadConfig{"replicated_embedding_on_megatron",
                  {{"tp", 2}, {"vocab_parallel_embedding", false}},
                  "/vocab_parallel_embedding",
                  "VocabParallelEmbedding"},
        BadConfig{"bad_loss_kernel",
                  {{"stack", "torch-compile"}, {"loss_kernel", "fused"}},
                  "/loss_kernel",
                  "unknown loss_kernel value"},
        BadConfig{"upcast_on_megatron",
                  {{"loss_kernel", "native"}},
                  "/loss_kernel",
                  "Megatron's fused cross entropy"},
        BadConfig{"negative_outer", {{"dp_outer", -2}}, "/dp_outer", "must be positive"},
        BadConfig{"zero_micro_batch", {{"micro_batch", 0}}, "/micro_batch", "must be positive"},
        BadConfig{"zero_grad_accum", {{"grad_accum", 0}}, "/grad_accum", "must be positive"},
        BadConfig{"negative_seq", {{"seq_len", -1}}, "/seq_len", "must be positive"},
        BadConfig{"zero_bucket", {{"bucket_bytes", 0}}, "/bucket_bytes", "must be positive"},
        BadConfig{"negative_prefetch",
                  {{"forward_prefetch", -1}},
                  "/forward_prefetch",
                  "must not be negative"},
        BadConfig{"zero_live_grads",
                  {{"max_live_grad_buffers", 0}},
                  "/max_live_grad_buffers",
                  "must be positive"},
        BadConfig{"string_size", {{"micro_batch", "two"}}, "/micro_batch", "expected an integer"},
        BadConfig{"fractional_size", {{"micro_batch", 1.5}}, "/micro_batch", "expected an integer"},
        BadConfig{"bad_dtype", {{"param_dtype", "bf17"}}, "/param_dtype", "did you mean 'bf16'"},
        BadConfig{"fp8_params", {{"param_dtype", "fp8"}}, "/param_dtype", "fp8_param_gather"},
        BadConfig{"fp8_main_grads",
                  {{"main_grad_dtype", "fp8"}},
                  "/main_grad_dtype",
                  "fp32, bf16 or fp16"},
        BadConfig{"bad_recompute", {{"recompute", "partial"}}, "/recompute", "unknown recompute"},
        BadConfig{"modules_without_selective",
                  {{"recompute", "full"}, {"recompute_modules", {"moe_act"}}},
                  "/recompute_modules",
                  "set recompute: selective"},
        BadConfig{"unknown_module",
                  {{"recompute", "selective"}, {"recompute_modules", {"moe_actt"}}},
                  "/recompute_modules",
                  "did you mean 'moe_act'"},
        BadConfig{"modules_not_a_list",
                  {{"recompute", "selective"}, {"recompute_modules", "moe_act"}},
                  "/recompute_modules",
                  "expected"},
        BadConfig{"fp8_without_zero3",
                  {{"fp8_param_gather", true}, {"sharding_strategy", "optim_grads"}},
                  "/fp8_param_gather",
                  "optim_grads_params"},
        BadConfig{
            "recipe_without_fp8", {{"fp8_recipe", "mxfp8"}}, "/fp8_recipe", "fp8_param_gather"},
        BadConfig{"fp8_gather_without_fp8_gemms",
                  {{"fp8", false}, {"fp8_param_gather", true}},
                  "/fp8",
                  "set fp8: true"},
        BadConfig{
            "fp8_gemms_on_gathered_bf16", {{"fp8", true}}, "/fp8", "set fp8_param_gather: true"},
        BadConfig{"fp8_not_a_bool", {{"fp8", "yes"}}, "/fp8", "expected true or false"},
        BadConfig{"transpose_without_fp8",
                  {{"keep_fp8_transpose_cache", true}},
                  "/keep_fp8_transpose_cache",
                  "fp8_param_gather"},
        BadConfig{"fine_grained_without_zero3",
                  {{"fine_grained_param_gather", true}, {"sharding_strategy", "optim"}},
                  "/fine_grained_param_gather",
                  "optim_grads_params"},
        BadConfig{
            "outer_optim_without_zero3",
            {{"outer_strategy", "optim"}, {"dp_outer", 2}, {"sharding_strategy", "optim_grads"}},
            "/outer_strategy",
            "optim_grads_params"},
        BadConfig{"outer_optim_without_outer",
                  {{"outer_strategy", "optim"}},
                  "/outer_strategy",
                  "dp_outer"},
        BadConfig{"double_buffer_no_shard",
                  {{"double_buffer", true}, {"sharding_strategy", "no_shard"}},
                  "/double_buffer",
                  "optim_grads"},
        BadConfig{"double_buffer_deep_prefetch",
                  {{"double_buffer", true}, {"backward_prefetch", 2}},
                  "/backward_prefetch",
                  "prefetch must be 0 or 1"},
        BadConfig{"double_buffer_deep_drain",
                  {{"double_buffer", true}, {"max_live_grad_buffers", 3}},
                  "/max_live_grad_buffers",
                  "at most 2"},
        BadConfig{
            "empty_units", {{"unit_modules", json::array()}}, "/unit_modules", "at least one"},
        BadConfig{"bad_bool", {{"async_reduce", "yes"}}, "/async_reduce", "true or false"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(FsdpConfig, NotAnObject) {
  EXPECT_THROW(fsdp_config_from_json(json::array(), "cfg"), InputError);
}

ClusterSpec h100_nodes(int64_t nodes) {
  return load_cluster("dgx-h100", nodes, std::nullopt);
}

TEST(ResolveConfig, DerivesDpShardFromTheGpuCount) {
  const ModelSpec model = load_model("tiny");
  const FsdpConfig c = resolve_fsdp_config(fsdp_config_from_json({{"dp_outer", 2}}, "cfg"), model,
                                           h100_nodes(4), "cfg");
  EXPECT_EQ(c.dp_shard, 16);
  EXPECT_EQ(c.dp_outer, 2);
}

TEST(ResolveConfig, ProductMustEqualTheGpuCount) {
  const ModelSpec model = load_model("tiny");
  try {
    resolve_fsdp_config(fsdp_config_from_json({{"dp_shard", 3}}, "cfg"), model, h100_nodes(1),
                        "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/dp_shard");
    EXPECT_NE(e.reason().find("must equal the GPU count 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_fsdp_config(fsdp_config_from_json({{"dp_outer", 3}}, "cfg"), model,
                                   h100_nodes(1), "cfg"),
               InputError);
}

TEST(ResolveConfig, RecomputeModulesAreMegatronsAndNeedWhatTheyRecompute) {
  const json selective = {{"recompute", "selective"}};
  auto with = [&](json extra) {
    json j = selective;
    j.update(extra);
    return fsdp_config_from_json(j, "cfg");
  };
  // Kept through a round trip, and named in tables.
  const FsdpConfig c = with({{"recompute_modules", {"moe_act", "layernorm"}}});
  EXPECT_EQ(fsdp_config_to_json(c)["recompute_modules"], json({"layernorm", "moe_act"}));
  EXPECT_EQ(recompute_label(c), "selective(layernorm+moe_act)");
  EXPECT_EQ(recompute_label(with(json::object())), "selective");
  EXPECT_FALSE(fsdp_config_to_json(with(json::object())).contains("recompute_modules"));
  EXPECT_EQ(recompute_label(with({{"recompute_modules", json::array()}})), "selective()");
  EXPECT_NO_THROW(resolve_fsdp_config(c, load_model("tiny-moe"), h100_nodes(1), "cfg"));
  try {
    resolve_fsdp_config(with({{"recompute_modules", {"mla_up_proj"}}}), load_model("tiny"),
                        h100_nodes(1), "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute_modules");
    EXPECT_NE(e.reason().find("multi-latent attention"), std::string::npos) << e.what();
  }
  try {
    resolve_fsdp_config(with({{"recompute_modules", {"mlp"}}, {"stack", "torch-compile"}}),
                        load_model("tiny"), h100_nodes(1), "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute_modules");
    EXPECT_NE(e.reason().find("Megatron-Core's option"), std::string::npos) << e.what();
  }
}

TEST(ResolveConfig, Fp8NeedsFp8TensorCores) {
  const ModelSpec model = load_model("tiny");
  const FsdpConfig fp8 = fsdp_config_from_json({{"fp8_param_gather", true}}, "cfg");
  EXPECT_NO_THROW(resolve_fsdp_config(fp8, model, h100_nodes(1), "cfg"));
  try {
    resolve_fsdp_config(fp8, model, load_cluster("dgx-a100", 1, std::nullopt), "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/fp8_param_gather");
    EXPECT_NE(e.reason().find("no FP8"), std::string::npos);
  }
}

// FP8 GEMMs without FP8 weights (Megatron DDP + distributed optimizer with --fp8-format):
// the key is written back, follows fp8_param_gather when unset, and needs FP8 hardware.
TEST(ResolveConfig, Fp8GemmsStandAloneOnUnshardedWeights) {
  const ModelSpec model = load_model("tiny");
  const FsdpConfig zero1 =
      fsdp_config_from_json({{"fp8", true}, {"sharding_strategy", "optim"}}, "cfg");
  EXPECT_TRUE(fp8_compute(zero1));
  EXPECT_FALSE(zero1.fp8_param_gather);
  EXPECT_EQ(fsdp_config_to_json(zero1)["fp8"], true);
  EXPECT_EQ(fsdp_config_to_json(zero1)["fp8_recipe"], "delayed");
  EXPECT_FALSE(fsdp_config_to_json(FsdpConfig{}).contains("fp8"));
  EXPECT_TRUE(fp8_compute(fsdp_config_from_json({{"fp8_param_gather", true}}, "cfg")));
  EXPECT_FALSE(fp8_compute(FsdpConfig{}));
  const FsdpConfig resolved = resolve_fsdp_config(zero1, model, h100_nodes(1), "cfg");
  EXPECT_EQ(resolved.fp8, std::optional<bool>(true));
  EXPECT_EQ(resolve_fsdp_config(FsdpConfig{}, model, h100_nodes(1), "cfg").fp8,
            std::optional<bool>(false));
  try {
    resolve_fsdp_config(zero1, model, load_cluster("dgx-a100", 1, std::nullopt), "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/fp8");
    EXPECT_NE(e.reason().find("no FP8"), std::string::npos);
  }
}

// The file may say what Megatron-FSDP accepts; the planner refuses what it cannot plan.
TEST(ResolveConfig, FineGrainedParamGatherIsRefusedNotIgnored) {
  const ModelSpec model = load_model("tiny");
  const FsdpConfig c = fsdp_config_from_json(
      {{"fp8_param_gather", true}, {"fp8_recipe", "mxfp8"}, {"fine_grained_param_gather", true}},
      "cfg");
  try {
    resolve_fsdp_config(c, model, h100_nodes(1), "cfg");
    FAIL() << "fine_grained_param_gather was accepted but nothing models it";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "cfg");
    EXPECT_EQ(e.field(), "/fine_grained_param_gather");
    EXPECT_NE(e.reason().find("not modelled"), std::string::npos) << e.reason();
  }
}

TEST(ResolveConfig, SequenceLongerThanLearnedPositions) {
  const ModelSpec gpt3 = load_model("gpt3-175b");
  const FsdpConfig defaults;
  try {
    resolve_fsdp_config(defaults, gpt3, h100_nodes(1), "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/seq_len");
    EXPECT_NE(e.reason().find("2048"), std::string::npos);
  }
  FsdpConfig short_seq;
  short_seq.seq_len = 2048;
  EXPECT_NO_THROW(resolve_fsdp_config(short_seq, gpt3, h100_nodes(1), "cfg"));
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// Megatron's CUDA graph settings (transformer_config.py at d98e8a6): kept through a round
// trip and named in tables; what Megatron asserts is refused with its reason.
TEST(ResolveConfig, CudaGraphScopesFollowMegatronsRules) {
  using json = nlohmann::json;
  const FsdpConfig c = fsdp_config_from_json({{"cuda_graphs", {"moe_router", "attn"}}}, "cfg");
  EXPECT_EQ(fsdp_config_to_json(c)["cuda_graphs"], json({"attn", "moe_router"}));
  EXPECT_FALSE(fsdp_config_to_json(FsdpConfig{}).contains("cuda_graphs"));
  EXPECT_NE(describe_config(c).find("graphs(attn+moe_router)"), std::string::npos)
      << describe_config(c);
  EXPECT_NO_THROW(resolve_fsdp_config(c, load_model("tiny-moe"), h100_nodes(1), "cfg"));
  struct Refused {
    const char* model;
    json config;
    const char* reason;
  };
  const std::vector<Refused> refused = {
      {"tiny", {{"cuda_graphs", {"attn"}}, {"stack", "torch-compile"}}, "not modelled"},
      {"tiny", {{"cuda_graphs", {"layer", "attn"}}}, "stand alone"},
      {"tiny", {{"cuda_graphs", {"full_iteration", "attn"}}}, "stand alone"},
      {"tiny-moe", {{"cuda_graphs", {"moe", "moe_router"}}}, "both moe and moe_router"},
      {"tiny-moe", {{"cuda_graphs", {"moe_preprocess"}}}, "only with moe_router"},
      {"tiny", {{"cuda_graphs", {"moe_router"}}}, "has none"},
      {"tiny-moe", {{"cuda_graphs", {"mlp"}}}, "every layer of tiny-moe is MoE"},
      {"tiny-moe", {{"cuda_graphs", {"moe"}}}, "drop-and-pad"},
      {"tiny-moe",
       {{"cuda_graphs", {"moe_router"}},
        {"recompute", "selective"},
        {"recompute_modules", {"moe"}}},
       "moe recompute"},
      {"tiny", {{"cuda_graphs", {"attn"}}, {"recompute", "full"}}, "full_iteration"},
  };
  for (const Refused& r : refused) {
    try {
      resolve_fsdp_config(fsdp_config_from_json(r.config, "cfg"), load_model(r.model),
                          h100_nodes(1), "cfg");
      ADD_FAILURE() << r.config.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "/cuda_graphs") << e.what();
      EXPECT_NE(e.reason().find(r.reason), std::string::npos) << e.what();
    }
  }
  // An unknown scope names the nearest.
  try {
    fsdp_config_from_json({{"cuda_graphs", {"atn"}}}, "cfg");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/cuda_graphs");
    EXPECT_NE(e.reason().find("did you mean 'attn'"), std::string::npos) << e.what();
  }
  // A capacity factor is padded: the preprocessing is captured (Megatron refuses it only
  // when tokens drop without padding).
  EXPECT_NO_THROW(
      resolve_fsdp_config(fsdp_config_from_json({{"cuda_graphs", {"moe_router", "moe_preprocess"}},
                                                 {"moe_dispatcher", "alltoall"},
                                                 {"moe_capacity_factor", 1.0}},
                                                "cfg"),
                          load_model("tiny-moe"), h100_nodes(1), "cfg"));
  // full recompute runs with full-iteration graphs.
  EXPECT_NO_THROW(resolve_fsdp_config(
      fsdp_config_from_json({{"cuda_graphs", {"full_iteration"}}, {"recompute", "full"}}, "cfg"),
      load_model("tiny"), h100_nodes(1), "cfg"));
}

}  // namespace
}  // namespace shardplan
