// The host (CPU) work of a layer against counts worked by hand from docs/model.md's
// "Host time" table: ops × 13.48 µs plus C++-loop launches × 5 µs.
#include "models/host_work.h"

#include <gtest/gtest.h>

#include "models/transformer_builder.h"

namespace shardplan {
namespace {

TransformerArch dense_arch() {
  TransformerArch a;
  a.vocab_size = 1024;
  a.hidden_size = 256;
  a.num_layers = 2;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.ffn_hidden_size = 512;
  return a;
}

TransformerArch moe_arch() {
  TransformerArch a = dense_arch();
  a.num_experts = 16;
  a.experts_per_token = 2;
  a.moe_ffn_hidden_size = 128;
  a.moe_layers.assign(2, true);
  return a;
}

const Module& layer(const ModelSpec& model) {
  const Module* m = find_module(model.root, "layers.0");
  EXPECT_NE(m, nullptr);
  return *m;
}

BatchShape on(Stack stack, bool fp8 = false) {
  return BatchShape{.micro_batch = 1, .seq_len = 128, .fp8 = fp8, .stack = stack};
}

TEST(HostWork, DenseLayerOnMegatronTeCountsFusedCallsOnce) {
  const ModelSpec model = build_transformer(dense_arch(), "dense", "test", {});
  // Forward: input norm 1, linear_qkv 1 (k and v ride with q), attention with its fused
  // RoPE 3, o_proj 1, pre-MLP norm 1, linear_fc1 1 (up rides with gate), SwiGLU 1,
  // down 1, the two residual adds 2 = 12 ops. Backward: 2 + 2 + 3 + 2 + 2 + 2 + 1 + 2 + 2.
  const HostWork w = host_work(layer(model), on(Stack::megatron_te));
  EXPECT_DOUBLE_EQ(w.forward_seconds, 12 * kHostOpSeconds);
  EXPECT_DOUBLE_EQ(w.backward_seconds, 18 * kHostOpSeconds);
  EXPECT_EQ(w.forward_syncs, 0);
}

TEST(HostWork, EagerTorchRunsMoreOpsThanTeAndCompiledFewer) {
  const ModelSpec model = build_transformer(dense_arch(), "dense", "test", {});
  // Eager: norm 1, q k v 3, RoPE + transposes + SDPA 9, o 1, norm 1, gate and up 2, SiLU
  // and product 2, down 1, residuals 2 = 22.
  EXPECT_DOUBLE_EQ(host_work(layer(model), on(Stack::torch_eager)).forward_seconds,
                   22 * kHostOpSeconds);
  // Compiled: norm 1, q k v 3, attention with RoPE fused 2, o 1, norm 1, gate and up 2,
  // SwiGLU 1, down 1, the residuals fused 1 = 13.
  EXPECT_DOUBLE_EQ(host_work(layer(model), on(Stack::torch_compile)).forward_seconds,
                   13 * kHostOpSeconds);
  // A composite RMSNorm (older PyTorch) is six ops: two norms add ten.
  BatchShape composite = on(Stack::torch_eager);
  composite.fused_rms_norm = false;
  EXPECT_DOUBLE_EQ(host_work(layer(model), composite).forward_seconds, 32 * kHostOpSeconds);
}

TEST(HostWork, Fp8AddsTheQuantizations) {
  const ModelSpec model = build_transformer(dense_arch(), "dense", "test", {});
  // Four TE linear calls (qkv, o, fc1, fc2): one quantization each way.
  const HostWork bf16 = host_work(layer(model), on(Stack::megatron_te));
  const HostWork fp8 = host_work(layer(model), on(Stack::megatron_te, true));
  EXPECT_DOUBLE_EQ(fp8.forward_seconds - bf16.forward_seconds, 4 * kHostOpSeconds);
  EXPECT_DOUBLE_EQ(fp8.backward_seconds - bf16.backward_seconds, 4 * kHostOpSeconds);
}

TEST(HostWork, GroupedExpertsLaunchOneGemmPerLocalExpertOnTe) {
  const ModelSpec ep2 = build_transformer(moe_arch(), "moe", "test", {.ep = 2});
  const ModelSpec ep4 = build_transformer(moe_arch(), "moe", "test", {.ep = 4});
  const HostWork a = host_work(layer(ep2), on(Stack::megatron_te));
  const HostWork b = host_work(layer(ep4), on(Stack::megatron_te));
  // 8 against 4 local experts; two grouped linear calls (gate with up, down), each
  // launching 3 per expert forward (the GEMM and two torch.empty) and 4 backward.
  EXPECT_NEAR(a.forward_seconds - b.forward_seconds, 2 * 3 * 4 * kHostLaunchSeconds, 1e-15);
  EXPECT_NEAR(a.backward_seconds - b.backward_seconds, 2 * 4 * 4 * kHostLaunchSeconds, 1e-15);
  // torch._grouped_mm is one op whatever the experts.
  EXPECT_DOUBLE_EQ(host_work(layer(ep2), on(Stack::torch_eager)).forward_seconds,
                   host_work(layer(ep4), on(Stack::torch_eager)).forward_seconds);
}

TEST(HostWork, DroplessDispatchSyncsOnceCapacityPaddedDoesNot) {
  const ModelSpec dropless = build_transformer(moe_arch(), "moe", "test", {.ep = 4});
  EXPECT_EQ(host_work(layer(dropless), on(Stack::megatron_te)).forward_syncs, 1);
  ModelParallel capped{.ep = 4};
  capped.moe_capacity_factor = 1.0;
  const ModelSpec padded = build_transformer(moe_arch(), "moe", "test", capped);
  EXPECT_EQ(host_work(layer(padded), on(Stack::megatron_te)).forward_syncs, 0);
  // torchtitan copies the split sizes to the host only when experts span ranks.
  EXPECT_EQ(host_work(layer(dropless), on(Stack::torch_eager)).forward_syncs, 1);
  const ModelSpec local = build_transformer(moe_arch(), "moe", "test", {.ep = 1});
  EXPECT_EQ(host_work(layer(local), on(Stack::torch_eager)).forward_syncs, 0);
  EXPECT_EQ(host_work(layer(local), on(Stack::megatron_te)).forward_syncs, 1);
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// A part Megatron captures costs one call of the graphed callable, one graph launch and
// 0.58 µs per kernel node, forward and backward alike.
double replay(double kernels) {
  return kHostOpSeconds + kGraphLaunchSeconds + kernels * kGraphNodeSeconds;
}

BatchShape graphed(std::initializer_list<CudaGraphScope> scopes) {
  BatchShape s{.micro_batch = 1, .seq_len = 128, .stack = Stack::megatron_te};
  for (CudaGraphScope g : scopes) s.cuda_graphs.add(g);
  return s;
}

TEST(HostWorkGraphs, AttnCapturesTheNormAttentionAndItsResidual) {
  const ModelSpec model = build_transformer(dense_arch(), "dense", "test", {});
  const Module& l = layer(model);
  // Forward: the attention part (input norm 1, qkv 1, attention 3, o 1, residual 1 = 7
  // kernels) replayed, the MLP part (norm 1, fc1 1, SwiGLU 1, down 1, residual 1) eager.
  const HostWork attn = host_work(l, graphed({CudaGraphScope::attn}));
  EXPECT_NEAR(attn.forward_seconds, replay(7) + 5 * kHostOpSeconds, 1e-15);
  // Backward: 2 + 2 + 3 + 2 + 1 = 10 replayed; 2 + 2 + 1 + 2 + 1 = 8 eager.
  EXPECT_NEAR(attn.backward_seconds, replay(10) + 8 * kHostOpSeconds, 1e-15);
  // The whole layer, and attn with mlp, are two replays.
  const HostWork whole = host_work(l, graphed({CudaGraphScope::layer}));
  EXPECT_NEAR(whole.forward_seconds, replay(7) + replay(5), 1e-15);
  EXPECT_NEAR(host_work(l, graphed({CudaGraphScope::attn, CudaGraphScope::mlp})).forward_seconds,
              whole.forward_seconds, 1e-15);
  // The whole step: nodes only.
  EXPECT_NEAR(host_work(l, graphed({CudaGraphScope::full_iteration})).forward_seconds,
              12 * kGraphNodeSeconds, 1e-15);
}

TEST(HostWorkGraphs, ADroplessMoeBlockStaysEagerWithItsSync) {
  const ModelSpec dropless = build_transformer(moe_arch(), "moe", "test", {.ep = 4});
  const Module& l = layer(dropless);
  const HostWork eager = host_work(l, on(Stack::megatron_te));
  // layer: attention captured; the norm, router and preprocessing captured; the dispatch's
  // sync and the experts eager.
  const HostWork whole = host_work(l, graphed({CudaGraphScope::layer}));
  EXPECT_EQ(whole.forward_syncs, 1);
  EXPECT_LT(whole.forward_seconds, eager.forward_seconds);
  EXPECT_EQ(host_work(l, graphed({CudaGraphScope::attn, CudaGraphScope::moe_router,
                                  CudaGraphScope::moe_preprocess}))
                .forward_seconds,
            whole.forward_seconds);
  // moe_router alone leaves the preprocessing's 4 ops eager.
  EXPECT_NEAR(
      host_work(l, graphed({CudaGraphScope::attn, CudaGraphScope::moe_router})).forward_seconds -
          whole.forward_seconds,
      4 * kHostOpSeconds - 4 * kGraphNodeSeconds, 1e-15);
  // full_iteration: a captured step makes no host syncs.
  EXPECT_EQ(host_work(l, graphed({CudaGraphScope::full_iteration})).forward_syncs, 0);
}

TEST(HostWorkGraphs, ADropAndPadMoeBlockIsCapturedWhole) {
  ModelParallel capped{.ep = 4};
  capped.moe_capacity_factor = 1.0;
  const ModelSpec padded = build_transformer(moe_arch(), "moe", "test", capped);
  const Module& l = layer(padded);
  const HostWork moe = host_work(l, graphed({CudaGraphScope::attn, CudaGraphScope::moe}));
  EXPECT_EQ(moe.forward_syncs, 0);
  // Two replays forward whatever the experts, the attention part and the whole MLP part,
  // each a call, a launch and its nodes: fewer nodes than the eager seconds ÷ 5 µs (the
  // cheapest eager launch).
  const HostWork eager = host_work(l, on(Stack::megatron_te));
  const double nodes_at_most = eager.forward_seconds / kHostLaunchSeconds;
  EXPECT_LE(moe.forward_seconds,
            2 * (kHostOpSeconds + kGraphLaunchSeconds) + nodes_at_most * kGraphNodeSeconds);
  EXPECT_EQ(host_work(l, graphed({CudaGraphScope::layer})).forward_seconds, moe.forward_seconds);
}

}  // namespace
}  // namespace shardplan
