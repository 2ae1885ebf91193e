// FLOPs and saved activations against closed forms worked out independently of the
// builder: the PaLM/Megatron FLOPs convention and Korthikanti et al. (2022) Table 2.
#include "models/module_cost.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "models/error.h"
#include "models/parallel.h"
#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "tests/models/korthikanti_gpt.h"

namespace shardplan {
namespace {

struct Dense {
  const char* name;
  double vocab, hidden, layers, heads, kv_heads, ffn;
  bool swiglu, tied, learned_positions, bias;
};

// Weights that take part in matmuls: N of the "6·N" convention. The input embedding is a
// lookup (no FLOPs) unless tied to the head; norms and biases are excluded (they are
// below 0.01 % of N).
double matmul_parameters(const Dense& m) {
  const double head_dim = m.hidden / m.heads;
  const double kv = m.kv_heads * head_dim;
  const double attention = m.hidden * (m.hidden + 2 * kv) + m.hidden * m.hidden;
  const double mlp = (m.swiglu ? 3.0 : 2.0) * m.hidden * m.ffn;
  return m.layers * (attention + mlp) + m.vocab * m.hidden;  // + output head
}

const Dense kDense[] = {
    {"llama3-8b", 128256, 4096, 32, 32, 8, 14336, true, false, false, false},
    {"llama3-70b", 128256, 8192, 80, 64, 8, 28672, true, false, false, false},
    {"llama3.1-405b", 128256, 16384, 126, 128, 8, 53248, true, false, false, false},
    {"gpt3-175b", 50257, 12288, 96, 96, 96, 49152, false, true, true, true},
};

TEST(Flops, ModelFlopsMatchPalmConventionWithinTwoPercent) {
  for (const Dense& m : kDense) {
    for (int64_t seq : {2048, 8192}) {
      const ModelSpec model = load_model(m.name);
      if (model.max_seq_len > 0 && seq > model.max_seq_len) continue;
      const BatchShape shape{.micro_batch = 1, .seq_len = seq};
      const double per_token = model_training_flops(model.root, shape) / static_cast<double>(seq);
      // PaLM (Chowdhery et al. 2022, App. B): 6·N + 12·L·h·s, attention not halved.
      const double palm =
          6.0 * matmul_parameters(m) + 12.0 * m.layers * m.hidden * static_cast<double>(seq);
      EXPECT_NEAR(per_token / palm, 1.0, 0.02) << m.name << " at seq_len " << seq;
      // Our count is exact against the same terms (no norms/biases in matmuls).
      EXPECT_NEAR(per_token / palm, 1.0, 1e-9) << m.name << " at seq_len " << seq;
    }
  }
}

TEST(Flops, ExecutedForwardHalvesCausalAttention) {
  const Dense& m = kDense[0];
  const ModelSpec model = load_model(m.name);
  const BatchShape shape{.micro_batch = 2, .seq_len = 4096};
  const double tokens = 2.0 * 4096;
  // Forward: 2·N for the matmuls, and Q·Kᵀ + P·V = 4·h·s per token per layer, halved.
  const double expected = tokens * (2.0 * matmul_parameters(m) + 2.0 * m.layers * m.hidden * 4096);
  EXPECT_NEAR(forward_flops(model.root, shape) / expected, 1.0, 1e-12);
  // Backward: 2× the matmuls, 2.5× flash attention's forward.
  const double backward =
      tokens * (4.0 * matmul_parameters(m) + 2.5 * 2.0 * m.layers * m.hidden * 4096);
  EXPECT_NEAR(backward_flops(model.root, shape) / backward, 1.0, 1e-12);
}

TEST(Flops, MoeCountsOnlyTheRoutedExperts) {
  const ModelSpec model = load_model("mixtral-8x7b");
  const BatchShape shape{.micro_batch = 1, .seq_len = 4096};
  const double h = 4096, kv = 1024, f = 14336, layers = 32, vocab = 32000, experts = 8;
  const double per_layer = h * (2 * h + 2 * kv) + h * experts + 2.0 * 3.0 * h * f;  // top-2
  const double expected = 2.0 * (layers * per_layer + vocab * h) + layers * 2.0 * h * 4096;
  EXPECT_NEAR(forward_flops(model.root, shape) / 4096.0 / expected, 1.0, 1e-12);
}

using testing::korthikanti_gpt;

TEST(Activations, GptLayerMatchesKorthikantiTable2) {
  const ModelSpec model = build_transformer(korthikanti_gpt(false), "gpt", "test");
  const Module* layer = find_module(model.root, "layers.0");
  ASSERT_NE(layer, nullptr);
  const double s = 2048, b = 2, h = 1024, a = 16;
  const BatchShape shape{.micro_batch = 2, .seq_len = 2048, .activation_bytes = 2};
  // sbh(34 + 5as/h), plus what the paper leaves out: the fp32 mean and rstd of the two
  // LayerNorms (16 bytes per token).
  const double paper = s * b * h * (34.0 + 5.0 * a * s / h);
  const double stats = 16.0 * s * b;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::none), paper + stats);
  // Selective recompute drops the 5as²b attention term (paper, Section 5).
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::selective),
                   s * b * h * 34.0 + stats);
  // Full recompute keeps the layer input: 2sbh.
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::full), 2.0 * s * b * h);
}

TEST(Activations, FlashAttentionRemovesTheQuadraticTerm) {
  const ModelSpec model = build_transformer(korthikanti_gpt(true), "gpt", "test");
  const Module* layer = find_module(model.root, "layers.0");
  const double s = 2048, b = 1, h = 1024, a = 16;
  const BatchShape shape{.micro_batch = 1, .seq_len = 2048};
  // 34·sbh, the LayerNorm statistics, and flash's fp32 log-sum-exp per head and token.
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::none),
                   s * b * h * 34.0 + 16.0 * s * b + 4.0 * a * s * b);
}

TEST(Activations, LlamaLayerTermByTerm) {
  // docs/model.md: per token, bf16 elements 2h (norms) + h (qkv input) + q + 2kv (Q, K, V)
  // + q (attention output) + h (MLP input) + 2F (SwiGLU gate and up) + F (down input);
  // fp32: 4 (rstd) × 2 + 4·heads (log-sum-exp).
  const double h = 4096, kv = 1024, f = 14336, heads = 32, s = 8192;
  const double per_token = 2.0 * (2 * h + h + (h + 2 * kv) + h + h + 2 * f + f) + 8.0 + 4.0 * heads;
  const ModelSpec model = load_model("llama3-8b");
  const Module* layer = find_module(model.root, "layers.7");
  ASSERT_NE(layer, nullptr);
  const BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::none), per_token * s);
  // The same as 2·(6h + 2kv + 3F) + small terms; close to 34·h for Llama 3 8B.
  EXPECT_NEAR(per_token / h, 34.0, 0.1);
}

TEST(Activations, ScaleLinearlyWithMicroBatchAndDtype) {
  const ModelSpec model = load_model("tiny");
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    const double one = saved_activation_bytes(model.root, {.micro_batch = 1, .seq_len = 128}, r);
    const double three = saved_activation_bytes(model.root, {.micro_batch = 3, .seq_len = 128}, r);
    EXPECT_DOUBLE_EQ(three, 3.0 * one) << recompute_name(r);
  }
  const Module* layer = find_module(model.root, "layers.0");
  const double bf16 =
      saved_activation_bytes(*layer, {.seq_len = 128, .activation_bytes = 2}, Recompute::none);
  const double fp32 =
      saved_activation_bytes(*layer, {.seq_len = 128, .activation_bytes = 4}, Recompute::none);
  EXPECT_GT(fp32, 1.9 * bf16);
  EXPECT_LT(fp32, 2.0 * bf16) << "fp32 statistics do not double";
}

TEST(Activations, MoeExpertsSeeTheirShareOfTokens) {
  const ModelSpec model = load_model("mixtral-8x7b");
  const Module* experts_layer = find_module(model.root, "layers.0.mlp");
  ASSERT_NE(experts_layer, nullptr);
  const double h = 4096, f = 14336, s = 1024;
  // Router: its input (bf16) and fp32 probabilities over 8 experts; 2 routed copies of
  // the token, each saving h (the permuted token, fc1's input) + 2F (SwiGLU) + F (down
  // input) in bf16 and its fp32 routing weight; Megatron's unpermute keeps only indices
  // (token_dispatcher.py at Megatron-LM d98e8a6).
  const double per_token = 2.0 * h + 4.0 * 8 + 2.0 * (2.0 * (h + 2 * f + f) + 4.0);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*experts_layer, {.seq_len = 1024}, Recompute::none),
                   per_token * s);
}

// torchtitan's per-op policy on a Llama 3 8B layer, worked from its source
// (torchtitan/distributed/activation_checkpoint.py: save _op_sac_save_list ops "except
// every second mm", the counter restarting per layer). Matmuls in forward order: wq 1, wk
// 2, wv 3, wo 4, w1 5, w3 6, w2 7. Kept per token: the layer input (h), wq's output (h),
// wv's (kv), SDPA's output (h) and fp32 log-sum-exp (4 bytes per head), w1's (f), w2's
// (h): 8h + 2kv + 2f + 4·heads bytes. Re-run in backward: wk, wo, w3: 2·(h·kv + h·h + h·f)
// FLOPs per token.
TEST(Recompute, SacOpKeepsWhatTorchtitansPolicySaves) {
  const double h = 4096, kv = 1024, f = 14336, heads = 32, s = 8192;
  const ModelSpec model = load_model("llama3-8b");
  const Module* layer = find_module(model.root, "layers.3");
  ASSERT_NE(layer, nullptr);
  const BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::sac_op),
                   (8 * h + 2 * kv + 2 * f + 4 * heads) * s);
  EXPECT_DOUBLE_EQ(recompute_flops(*layer, shape, Recompute::sac_op),
                   2.0 * (h * kv + h * h + h * f) * s);
  // Less than Megatron's selective (which keeps every GEMM input), more than full.
  EXPECT_LT(saved_activation_bytes(*layer, shape, Recompute::sac_op),
            saved_activation_bytes(*layer, shape, Recompute::selective));
  EXPECT_GT(saved_activation_bytes(*layer, shape, Recompute::sac_op),
            saved_activation_bytes(*layer, shape, Recompute::full));
  EXPECT_EQ(recompute_flops(*layer, shape, Recompute::full), 0.0);
  EXPECT_EQ(recompute_flops(*layer, shape, Recompute::none), 0.0);
}

// The same under tp 2 with sequence parallelism: column-parallel outputs split by t, the
// row-parallel w2 output is the partial sum over every token (h, before its
// reduce-scatter), and the two reduce-scatter outputs are kept beside the input shard.
TEST(Recompute, SacOpUnderTensorParallelism) {
  const double h = 4096, kv = 1024, f = 14336, heads = 32, s = 8192, t = 2;
  const ModelSpec whole = load_model("llama3-8b");
  const ModelSpec rank = parallel_model(whole, {.tp = 2, .sequence_parallel = true});
  const Module* layer = find_module(rank.root, "layers.0");
  ASSERT_NE(layer, nullptr);
  const BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  const double per_token = 2.0 * (3 * h / t + h / t + kv / t + h / t + f / t + h) + 4.0 * heads / t;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::sac_op), per_token * s);
}

TEST(Recompute, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_recompute("full", "f", "/recompute"), Recompute::full);
  EXPECT_EQ(parse_recompute("sac_op", "f", "/recompute"), Recompute::sac_op);
  EXPECT_EQ(parse_recompute("sac_layer", "f", "/recompute"), Recompute::sac_layer);
  EXPECT_EQ(parse_stack("torch-eager", "f", "/stack"), Stack::torch_eager);
  try {
    parse_stack("torch", "cfg.json", "/stack");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/stack");
    EXPECT_NE(e.reason().find("megatron-te"), std::string::npos) << e.reason();
  }
  try {
    parse_recompute("ful", "cfg.json", "/recompute");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute");
    EXPECT_NE(e.reason().find("did you mean 'full'"), std::string::npos);
  }
}

// Measured on an H100 (tools/measure/h100_probe.py, tests/data/h100_activations.json):
// the bytes an eager PyTorch Llama layer keeps for backward. The fused profile (Megatron /
// Transformer Engine: SwiGLU fused, flash attention's output is the o projection's input)
// must lie below it; the torch-eager stack adds SiLU's output (F per token) and must be
// within 3 % (8B: 168 072 bytes per token against 167 048 measured).
TEST(ModuleCost, EagerPyTorchLayerActivationsMatchTheMeasurement) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h100_activations.json");
  ASSERT_TRUE(in.good());
  for (const auto& measured : nlohmann::json::parse(in)) {
    const ModelSpec model = load_model(measured["model"].get<std::string>());
    BatchShape shape{.micro_batch = measured["micro_batch"], .seq_len = measured["seq_len"]};
    const Module* layer = find_module(model.root, "layers.0");
    ASSERT_NE(layer, nullptr);
    const double fused = saved_activation_bytes(*layer, shape, Recompute::none);
    const double bytes = measured["saved_bytes_per_layer"];
    EXPECT_GT(bytes, fused) << measured.dump();
    shape.stack = Stack::torch_eager;
    const double eager = saved_activation_bytes(*layer, shape, Recompute::none);
    const double ffn = measured["model"] == "llama3-8b" ? 14336 : 28672;
    EXPECT_DOUBLE_EQ(eager - fused, 2.0 * ffn * static_cast<double>(shape.tokens()));
    EXPECT_NEAR(eager / bytes, 1.0, 0.03) << measured.dump();
    // torch-compile fuses the SwiGLU (the fused profile); sac_op and full keep no SiLU output.
    shape.stack = Stack::torch_compile;
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*layer, shape, Recompute::none), fused);
  }
}

// The cross entropy's working memory beyond its saved fp32 softmax, per token of a V-entry
// vocabulary: Megatron's fused kernel holds the bf16 logits (2V bytes), PyTorch's
// cross_entropy(logits.float()) the fp32 gradient and input gradient (8V).
TEST(ModuleCost, LossWorkspaceByStack) {
  const ModelSpec model = load_model("llama3-8b");
  BatchShape shape{.micro_batch = 2, .seq_len = 4096};
  const double tokens = 8192, vocab = 128256;
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 2.0 * vocab * tokens);
  shape.stack = Stack::torch_compile;
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 8.0 * vocab * tokens);
  shape.stack = Stack::torch_eager;
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 8.0 * vocab * tokens);
  const Module* layer = find_module(model.root, "layers.0");
  EXPECT_EQ(workspace_bytes(*layer, shape), 0.0);
}

// F.cross_entropy on the bf16 logits (loss_kernel native, KempnerForge's loss): the
// log-softmax saved in bf16 (2V bytes per token, beside the int64 label) instead of fp32
// (4V), and backward's two gradients in bf16 (4V) instead of fp32 (8V). Megatron's fused
// loss ignores the flag (it computes in fp32 either way).
TEST(ModuleCost, LossOnBf16LogitsHalvesItsBytes) {
  const ModelSpec model = load_model("llama3-8b");
  const Module* loss = find_module(model.root, "loss");
  ASSERT_NE(loss, nullptr);
  const double tokens = 8192, vocab = 128256;
  BatchShape shape{.micro_batch = 2, .seq_len = 4096, .stack = Stack::torch_compile};
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*loss, shape, Recompute::none),
                   (4.0 * vocab + 8.0) * tokens);
  shape.loss_kernel = LossKernel::native;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*loss, shape, Recompute::none),
                   (2.0 * vocab + 8.0) * tokens);
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 4.0 * vocab * tokens);
  // Compiled: the same bf16 logits kept, and backward writes only their gradient.
  shape.loss_kernel = LossKernel::compiled;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*loss, shape, Recompute::none),
                   (2.0 * vocab + 8.0) * tokens);
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 2.0 * vocab * tokens);
  shape.stack = Stack::megatron_te;
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*loss, shape, Recompute::none),
                   (4.0 * vocab + 8.0) * tokens);
  EXPECT_DOUBLE_EQ(workspace_bytes(model.root, shape), 2.0 * vocab * tokens);
}

// FP8 casts by hand on a Llama 3 8B layer: 4 bytes per element of every matmul input in
// forward (q, k, v and the two MLP projections read h, o reads q = h, down reads F: 6h + F)
// and of every output gradient in backward (q h, k and v kv each, o h, gate and up F each,
// down h: 3h + 2kv + 2F); nothing without FP8, nothing for the BF16 output layer.
TEST(ModuleCost, Fp8CastBytesByHand) {
  const double h = 4096, kv = 1024, f = 14336, tokens = 8192;
  const ModelSpec model = load_model("llama3-8b");
  const Module* layer = find_module(model.root, "layers.0");
  const Module* head = find_module(model.root, "lm_head");
  ASSERT_NE(layer, nullptr);
  ASSERT_NE(head, nullptr);
  BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  EXPECT_EQ(fp8_cast_bytes(*layer, shape).forward, 0.0);
  shape.fp8 = true;
  const Fp8CastBytes casts = fp8_cast_bytes(*layer, shape);
  EXPECT_DOUBLE_EQ(casts.forward, 4.0 * (6 * h + f) * tokens);
  EXPECT_DOUBLE_EQ(casts.backward, 4.0 * (3 * h + 2 * kv + 2 * f) * tokens);
  EXPECT_EQ(fp8_cast_bytes(*head, shape).forward, 0.0);
  // tp 2 with sequence parallelism: the casts run on the shards before the FP8 gathers and
  // on the local column outputs, so every term halves.
  const ModelSpec rank = parallel_model(model, {.tp = 2, .sequence_parallel = true});
  const Module* split = find_module(rank.root, "layers.0");
  ASSERT_NE(split, nullptr);
  const Fp8CastBytes halves = fp8_cast_bytes(*split, shape);
  EXPECT_DOUBLE_EQ(halves.forward, casts.forward / 2);
  EXPECT_DOUBLE_EQ(halves.backward, casts.backward / 2);
}

TEST(ModuleCost, GemmShapesAddUpToTheGemmFlops) {
  for (const char* name : {"llama3-8b", "mixtral-8x7b"}) {
    const ModelSpec model = load_model(name);
    const BatchShape shape{.micro_batch = 2, .seq_len = 4096};
    const Module* layer = find_module(model.root, "layers.0");
    ASSERT_NE(layer, nullptr);
    double gemm = 0;
    for (const GemmShape& g : forward_gemms(*layer, shape))
      gemm += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    const double expected =
        forward_flops(*layer, shape) - forward_flops_of_kind(*layer, shape, ComputeKind::attention);
    EXPECT_NEAR(gemm / expected, 1.0, 1e-6) << name;
  }
}

}  // namespace
}  // namespace shardplan
