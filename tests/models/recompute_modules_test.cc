// Megatron's --recompute-modules against closed forms worked from Megatron-LM's source
// (docs/research/recompute_modules.md §5) and against the two published measurements
// that isolate one module (Megatron-Bridge's activation-recompute skill, Nemotron 3 Nano
// on H100: moe_act −4.194 GB, layernorm beside moe −1.014 GB).
#include <gtest/gtest.h>

#include "models/error.h"
#include "models/module_cost.h"
#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

RecomputeModules modules(std::initializer_list<RecomputeModule> list) {
  RecomputeModules out{.bits = 0};
  for (RecomputeModule m : list) out.add(m);
  return out;
}

using RM = RecomputeModule;

BatchShape shape_with(int64_t micro_batch, int64_t seq_len, RecomputeModules m) {
  return BatchShape{.micro_batch = micro_batch, .seq_len = seq_len, .recompute_modules = m};
}

// GPT-OSS-120B as Megatron-Bridge builds it (docs/fidelity/models/gpt-oss-120b.json).
TransformerArch gpt_oss_120b() {
  TransformerArch a;
  a.vocab_size = 201088;
  a.hidden_size = 2880;
  a.num_layers = 36;
  a.num_heads = 64;
  a.num_kv_heads = 8;
  a.head_dim = 64;
  a.qkv_bias = true;
  a.num_experts = 128;
  a.experts_per_token = 4;
  a.moe_ffn_hidden_size = 2880;
  a.moe_layers.assign(36, true);
  return a;
}

double saved(const ModelSpec& model, const BatchShape& shape) {
  return saved_activation_bytes(model.root, shape, Recompute::selective);
}

TEST(RecomputeModules, GptOss120bLayernormAndMoeActWorkedOut) {
  // EP 8, balanced routing: each rank's experts run k = 4 copies of its 16 384 tokens.
  const ModelSpec model =
      build_transformer(gpt_oss_120b(), "gpt-oss-120b", "test", {.ep = 8, .moe_imbalance = 1.0});
  const double tokens = 4.0 * 4096.0;
  const double base = saved(model, shape_with(4, 4096, modules({RM::core_attn})));
  // moe_act: fc2's bf16 input, F_e · 2 bytes per routed copy.
  const double moe_act = tokens * 36 * 4 * 2880 * 2;
  // layernorm: the pre-MLP norm's output (the router's saved input) and its fp32 1/rms;
  // the input norm is fused into the QKV linear in Megatron's TE spec.
  const double layernorm = tokens * 36 * (2880 * 2 + 4);
  EXPECT_DOUBLE_EQ(base - saved(model, shape_with(4, 4096, modules({RM::core_attn, RM::moe_act}))),
                   moe_act);
  EXPECT_DOUBLE_EQ(
      base - saved(model, shape_with(4, 4096, modules({RM::core_attn, RM::layernorm}))), layernorm);
  const BatchShape both = shape_with(4, 4096, modules({RM::core_attn, RM::layernorm, RM::moe_act}));
  EXPECT_DOUBLE_EQ(base - saved(model, both), moe_act + layernorm);
  // 28 804 bytes per token per layer: 15.8 GiB of one GPU (the research note's figure).
  EXPECT_NEAR((base - saved(model, both)) / (1024.0 * 1024 * 1024), 15.82, 0.01);
  // The backward re-creates one layer's worth at a time.
  const Module* layer = find_module(model.root, "layers.0");
  ASSERT_NE(layer, nullptr);
  EXPECT_DOUBLE_EQ(recompute_dropped_bytes(*layer, both, Recompute::selective),
                   (moe_act + layernorm) / 36);
  // Output-discarding recompute re-runs memory-bound work only: no GEMM FLOPs beyond core
  // attention's. The norm reads and writes h, the activation reads 2 F_e and writes F_e.
  const BatchShape attn_only = shape_with(4, 4096, modules({RM::core_attn}));
  EXPECT_DOUBLE_EQ(recompute_flops(*layer, both, Recompute::selective),
                   recompute_flops(*layer, attn_only, Recompute::selective));
  EXPECT_DOUBLE_EQ(recompute_io_bytes(*layer, both, Recompute::selective),
                   tokens * (2.0 * 2880 + 4.0 * 3.0 * 2880) * 2);
  EXPECT_DOUBLE_EQ(recompute_io_bytes(*layer, attn_only, Recompute::selective), 0.0);
}

// Nemotron 3 Nano's MoE layers as Megatron-Bridge's skill measured them (H100, BF16, seq
// 8192, MBS 1, TP 1, EP 8; SKILL.md:139-166 at Megatron-Bridge 067f987): 23 MoE layers of
// 128 experts, top 6, F_e 1856, squared-ReLU (not gated), h 2688. Its Mamba layers are not
// a shardplan architecture; the deltas below come from the MoE layers alone.
TransformerArch nemotron3_nano_moe_layers() {
  TransformerArch a;
  a.vocab_size = 131072;
  a.hidden_size = 2688;
  a.num_layers = 23;
  a.num_heads = 32;
  a.num_kv_heads = 2;
  a.head_dim = 128;
  a.mlp = MlpKind::gelu;
  a.num_experts = 128;
  a.experts_per_token = 6;
  a.moe_ffn_hidden_size = 1856;
  a.moe_layers.assign(23, true);
  return a;
}

TEST(RecomputeModules, NemotronNanoPublishedDeltasWithinOnePercent) {
  const ModelSpec model = build_transformer(nemotron3_nano_moe_layers(), "nano", "test",
                                            {.ep = 8, .moe_imbalance = 1.0});
  const RecomputeModules none{.bits = 0};
  // moe_act against [] at iteration 1: −4.194 GB measured.
  const double moe_act = saved(model, shape_with(1, 8192, none)) -
                         saved(model, shape_with(1, 8192, modules({RM::moe_act})));
  EXPECT_NEAR(moe_act / 4.194e9, 1.0, 0.01) << moe_act;
  // moe + layernorm against moe: −1.014 GB measured (the moe checkpoint keeps its input,
  // the norm output; layernorm frees it).
  const double layernorm = saved(model, shape_with(1, 8192, modules({RM::moe}))) -
                           saved(model, shape_with(1, 8192, modules({RM::moe, RM::layernorm})));
  EXPECT_NEAR(layernorm / 1.014e9, 1.0, 0.01) << layernorm;
}

TEST(RecomputeModules, MoeCheckpointKeepsOnlyItsInputAndCoversMoeAct) {
  const ModelSpec model =
      build_transformer(gpt_oss_120b(), "gpt-oss-120b", "test", {.ep = 8, .moe_imbalance = 1.0});
  const Module* moe = find_module(model.root, "layers.0.mlp");
  ASSERT_NE(moe, nullptr);
  const RecomputeModules none{.bits = 0};
  const double tokens = 4096;
  const BatchShape plain = shape_with(1, 4096, none);
  const BatchShape checkpointed = shape_with(1, 4096, modules({RM::moe}));
  // R = 4 routed copies per token: the permuted input h, the gated fc1 output 2 F_e, the
  // activation output F_e (bf16) and the fp32 routing weight; the router's fp32 scores over
  // 128 experts. Kept: the router's input, the normed hidden state (h · 2 bytes).
  const double dropped = 4 * tokens * ((2880 + 3 * 2880) * 2 + 4) + tokens * 4 * 128;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*moe, plain, Recompute::selective) -
                       saved_activation_bytes(*moe, checkpointed, Recompute::selective),
                   dropped);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*moe, checkpointed, Recompute::selective),
                   tokens * 2880 * 2);
  // moe_act's bytes lie inside the moe checkpoint: listing both drops them once.
  const BatchShape both = shape_with(1, 4096, modules({RM::moe, RM::moe_act}));
  EXPECT_DOUBLE_EQ(saved(model, both), saved(model, checkpointed));
  EXPECT_DOUBLE_EQ(recompute_dropped_bytes(*moe, both, Recompute::selective),
                   recompute_dropped_bytes(*moe, checkpointed, Recompute::selective));
  // With layernorm too, a MoE layer keeps only the residual (the pre-MLP norm's input).
  const BatchShape with_norm = shape_with(1, 4096, modules({RM::moe, RM::layernorm}));
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*moe, with_norm, Recompute::selective), 0.0);
  // The whole MoE forward re-runs: router, experts (4 copies of 3 GEMMs), and the
  // dispatch's forward collectives (reruns_selectively on the MoE module).
  const double expert_flops = 4 * tokens * 2.0 * 3 * 2880 * 2880;
  const double router_flops = tokens * 2.0 * 2880 * 128;
  EXPECT_DOUBLE_EQ(recompute_flops(*moe, checkpointed, Recompute::selective),
                   expert_flops + router_flops);
  EXPECT_TRUE(reruns_selectively(*moe, checkpointed));
  EXPECT_FALSE(reruns_selectively(*moe, shape_with(1, 4096, modules({RM::moe_act}))));
}

TEST(RecomputeModules, DenseLayersOnlyMlpActsAndLayernormDoesNothing) {
  const ModelSpec whole = load_model("llama3-8b");
  const double h = 4096, f = 14336;
  for (const int64_t tp : {1, 4}) {
    const ModelSpec model =
        tp == 1 ? whole : parallel_model(whole, {.tp = tp, .sequence_parallel = true});
    const double t = static_cast<double>(tp);
    const double tokens = 2 * 4096;
    const BatchShape attn = shape_with(2, 4096, modules({RM::core_attn}));
    // Megatron's TE spec fuses both norms of a dense layer into the linears after them
    // (Llama 3 70B SFT: core_attn 58.8 GB, core_attn + layernorm 59.6 GB).
    EXPECT_DOUBLE_EQ(saved(model, shape_with(2, 4096, modules({RM::core_attn, RM::layernorm}))),
                     saved(model, attn))
        << "tp " << tp;
    // mlp: the normed input (h, sequence-parallel) and its 1/rms, the gate and up outputs
    // (2 F) and the activation's output (F), split over tp; per layer.
    const double per_layer = tokens * ((h * 2 + 4) / t + 3 * f * 2 / t);
    EXPECT_DOUBLE_EQ(
        saved(model, attn) - saved(model, shape_with(2, 4096, modules({RM::core_attn, RM::mlp}))),
        32 * per_layer)
        << "tp " << tp;
    // Its forward re-runs whole: 3 matmuls of h × F per token over tp.
    const Module* layer = find_module(model.root, "layers.0");
    ASSERT_NE(layer, nullptr);
    const BatchShape mlp_only = shape_with(2, 4096, modules({RM::mlp}));
    EXPECT_DOUBLE_EQ(recompute_flops(*layer, mlp_only, Recompute::selective),
                     tokens * 2.0 * 3 * h * f / t);
    EXPECT_EQ(reruns_selectively(*find_module(model.root, "layers.0.mlp"), mlp_only), true);
    // mla_up_proj and the MoE modules have nothing to act on in a dense GQA model.
    EXPECT_DOUBLE_EQ(saved(model, shape_with(2, 4096,
                                             modules({RM::core_attn, RM::moe, RM::moe_act,
                                                      RM::shared_experts, RM::mla_up_proj}))),
                     saved(model, attn));
  }
}

TEST(RecomputeModules, DeepSeekV3UpProjectionWorkedOut) {
  const ModelSpec model = load_model("deepseek-v3");
  const Module* attn = find_module(model.root, "layers.0.self_attn");
  ASSERT_NE(attn, nullptr);
  const double tokens = 4096;
  const BatchShape core = shape_with(1, 4096, modules({RM::core_attn}));
  const BatchShape up = shape_with(1, 4096, modules({RM::core_attn, RM::mla_up_proj}));
  // Q, K and V of 128 heads (192 + 192 + 128 wide) that core attention saved, and the up
  // projections' normed latents (1536 + 512) with their 1/rms.
  const double dropped = tokens * (128.0 * (2 * 192 + 128) * 2 + (1536 + 512) * 2 + 8);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*attn, core, Recompute::selective) -
                       saved_activation_bytes(*attn, up, Recompute::selective),
                   dropped);
  // Re-run: the two up projections' GEMMs (q_b 1536 → 24 576, kv_b 512 → 32 768), no
  // attention FLOPs beyond core_attn's own re-run.
  const double gemms = tokens * 2.0 * (1536.0 * 24576 + 512.0 * 32768);
  EXPECT_DOUBLE_EQ(recompute_flops(*attn, up, Recompute::selective) -
                       recompute_flops(*attn, core, Recompute::selective),
                   gemms);
  EXPECT_DOUBLE_EQ(recompute_flops(*attn, up, Recompute::selective, ComputeKind::attention),
                   recompute_flops(*attn, core, Recompute::selective, ComputeKind::attention));
  // Without core_attn, core attention keeps its fp32 log-sum-exp only.
  const BatchShape up_only = shape_with(1, 4096, modules({RM::mla_up_proj}));
  const Module* core_attention = find_module(model.root, "layers.0.self_attn.core_attention");
  ASSERT_NE(core_attention, nullptr);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*core_attention, up_only, Recompute::selective),
                   tokens * 4 * 128);
  // layernorm: MLA's input norm is a module of its own (no down-projection fusion): its
  // output, which q_a_proj saved, and its 1/rms.
  const double norm = tokens * (7168 * 2 + 4);
  const Module* layer = find_module(model.root, "layers.0");
  ASSERT_NE(layer, nullptr);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, core, Recompute::selective) -
                       saved_activation_bytes(
                           *layer, shape_with(1, 4096, modules({RM::core_attn, RM::layernorm})),
                           Recompute::selective),
                   norm);
}

TEST(RecomputeModules, EmptyListSavesWhatNoRecomputeSaves) {
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const BatchShape empty = shape_with(1, 4096, RecomputeModules{.bits = 0});
  EXPECT_DOUBLE_EQ(saved_activation_bytes(model.root, empty, Recompute::selective),
                   saved_activation_bytes(model.root, empty, Recompute::none));
  EXPECT_DOUBLE_EQ(recompute_flops(model.root, empty, Recompute::selective), 0.0);
  EXPECT_DOUBLE_EQ(recompute_dropped_bytes(model.root, empty, Recompute::selective), 0.0);
  // Outside selective recompute the list means nothing.
  const BatchShape all = shape_with(1, 4096, modules({RM::moe, RM::moe_act, RM::layernorm}));
  EXPECT_DOUBLE_EQ(saved_activation_bytes(model.root, all, Recompute::none),
                   saved_activation_bytes(model.root, empty, Recompute::none));
  EXPECT_DOUBLE_EQ(recompute_io_bytes(model.root, all, Recompute::full), 0.0);
}

// Transformer Engine keeps an FP8 GEMM's saved input quantized: 1 byte and at most 1/32
// byte of scales per element instead of 2. Llama's layer quantizes three saved GEMM inputs
// per token (q_proj's h, gate_proj's h, down_proj's F; k, v and up share theirs; o_proj
// keeps the bf16 attention output, Megatron's save_original_input); the output layer stays
// BF16; torchtitan's Float8 keeps the bf16 input (torchao float8_linear.py:45).
TEST(FP8SavedInputs, TransformerEngineKeepsGemmInputsQuantized) {
  const ModelSpec model = load_model("llama3-8b");
  const BatchShape bf16{.micro_batch = 1, .seq_len = 4096};
  BatchShape fp8 = bf16;
  fp8.fp8 = true;
  const double h = 4096, f = 14336, tokens = 4096;
  const double per_element = 2.0 - (1.0 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(model.root, bf16, Recompute::none) -
                       saved_activation_bytes(model.root, fp8, Recompute::none),
                   32 * tokens * (2 * h + f) * per_element);
  const Module* head = find_module(model.root, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*head, fp8, Recompute::none),
                   saved_activation_bytes(*head, bf16, Recompute::none));
  BatchShape torch_fp8 = fp8;
  torch_fp8.stack = Stack::torch_compile;
  BatchShape torch_bf16 = bf16;
  torch_bf16.stack = Stack::torch_compile;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(model.root, torch_fp8, Recompute::none),
                   saved_activation_bytes(model.root, torch_bf16, Recompute::none));
  // Full recompute keeps the layer's bf16 input: unchanged.
  EXPECT_DOUBLE_EQ(
      saved_activation_bytes(*find_module(model.root, "layers.0"), fp8, Recompute::full),
      saved_activation_bytes(*find_module(model.root, "layers.0"), bf16, Recompute::full));
}

// Under FP8 the router's input stays bf16 (Megatron's router is no TE module); moe_act then
// drops the experts' quantized fc2 input, R·F_e·(1 + 1/32) bytes (the research note's FP8
// column); layernorm the router's bf16 copy.
TEST(FP8SavedInputs, RecomputeModulesDropTheQuantizedCopy) {
  const ModelSpec model =
      build_transformer(gpt_oss_120b(), "gpt-oss-120b", "test", {.ep = 8, .moe_imbalance = 1.0});
  BatchShape attn = shape_with(1, 4096, modules({RM::core_attn}));
  attn.fp8 = true;
  BatchShape act = shape_with(1, 4096, modules({RM::core_attn, RM::moe_act}));
  act.fp8 = true;
  BatchShape norm = shape_with(1, 4096, modules({RM::core_attn, RM::layernorm}));
  norm.fp8 = true;
  const double tokens = 4096;
  EXPECT_DOUBLE_EQ(saved(model, attn) - saved(model, act), 36 * tokens * 4 * 2880 * (1 + 1.0 / 32));
  EXPECT_DOUBLE_EQ(saved(model, attn) - saved(model, norm), 36 * tokens * (2880 * 2 + 4));
}

// A TE linear that reads the input a sibling saves in bf16 keeps its own quantized copy
// under FP8: DeepSeek-V3's key-value down projection (beside q_a_proj) and its shared
// experts' fc1 (beside the router). Recompute modules that discard the input take it.
TEST(FP8SavedInputs, SiblingLinearsKeepTheirOwnQuantizedCopy) {
  const ModelSpec model = load_model("deepseek-v3");
  const double tokens = 4096, h = 7168, copy = h * (1 + 1.0 / 32);
  BatchShape bf16 = shape_with(1, 4096, modules({RM::core_attn}));
  BatchShape fp8 = bf16;
  fp8.fp8 = true;
  const Module* kv_down = find_module(model.root, "layers.0.self_attn.kv_a_proj_with_mqa");
  const Module* shared = find_module(model.root, "layers.3.mlp.shared_experts.gate_proj");
  ASSERT_NE(kv_down, nullptr);
  ASSERT_NE(shared, nullptr);
  for (const Module* m : {kv_down, shared}) {
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*m, bf16, Recompute::selective), 0.0) << m->name;
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*m, fp8, Recompute::selective), tokens * copy)
        << m->name;
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*m, fp8, Recompute::none), tokens * copy) << m->name;
    BatchShape norm = fp8;
    norm.recompute_modules.add(RM::layernorm);
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*m, norm, Recompute::selective), 0.0) << m->name;
  }
  for (const RM whole : {RM::moe, RM::shared_experts}) {
    BatchShape checkpointed = fp8;
    checkpointed.recompute_modules.add(whole);
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*shared, checkpointed, Recompute::selective), 0.0);
  }
}

TEST(RecomputeModules, NamesParseAndBadNamesAreRefused) {
  const RecomputeModules m = parse_recompute_modules({"moe_act", "layernorm"}, "c.json", "/x");
  EXPECT_EQ(m, modules({RM::layernorm, RM::moe_act}));
  EXPECT_EQ(recompute_module_list(m), (std::vector<std::string>{"layernorm", "moe_act"}));
  EXPECT_EQ(recompute_module_list(RecomputeModules{}), (std::vector<std::string>{"core_attn"}));
  EXPECT_EQ(parse_recompute_modules({}, "c.json", "/x"), RecomputeModules{.bits = 0});
  testing::expect_input_error(
      [] { parse_recompute_modules({"layer_norm"}, "c.json", "/recompute_modules"); },
      "/recompute_modules", "layernorm", "c.json");
  testing::expect_input_error(
      [] { parse_recompute_modules({"mhc"}, "c.json", "/recompute_modules"); },
      "/recompute_modules", "architecture shardplan does not model", "c.json");
}

}  // namespace
}  // namespace shardplan
