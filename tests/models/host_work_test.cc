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
