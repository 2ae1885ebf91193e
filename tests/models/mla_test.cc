// Multi-head latent attention and DeepSeek-V3 against counts worked out from its
// config.json (deepseek-ai/DeepSeek-V3) and the technical report's 671 B / 37 B.
#include <gtest/gtest.h>

#include "models/error.h"
#include "models/module_cost.h"
#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

// One MLA block of DeepSeek-V3 (h 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128,
// rope 64, v 128): q_a 7168·1536 + norm 1536 + q_b 1536·128·192 + kv_a 7168·576 + norm
// 512 + kv_b 512·128·256 + o 128·128·7168.
constexpr int64_t kMlaParameters =
    7168LL * 1536 + 1536 + 1536LL * 24576 + 7168LL * 576 + 512 + 512LL * 32768 + 16384LL * 7168;

TEST(Mla, DeepSeekV3ParametersWorkedOut) {
  const ModelSpec model = load_model("deepseek-v3");
  const Module* attention = find_module(model.root, "layers.0.self_attn");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(parameter_count(*attention), kMlaParameters);
  EXPECT_EQ(kMlaParameters, 187107328);
  // Embedding and head 2 · 129280 · 7168, final norm; 61 layers of MLA and 2 norms; 3 dense
  // SwiGLU MLPs of 3 · 7168 · 18432; 58 MoE layers of a router (7168 · 256), 256 routed
  // experts and 1 shared of 3 · 7168 · 2048 each.
  const int64_t expert = 3LL * 7168 * 2048;
  const int64_t expected = 2LL * 129280 * 7168 + 7168 + 61 * (kMlaParameters + 2 * 7168) +
                           3 * (3LL * 7168 * 18432) + 58 * (7168LL * 256 + 257 * expert);
  EXPECT_EQ(parameter_count(model.root), expected);
  EXPECT_NEAR(static_cast<double>(expected) / 671e9, 1.0, 0.005);
  // 37 B activated (rounded in the report): 8 routed experts and the shared one per MoE
  // layer; the count here includes the input embedding (0.93 B), which the report's 37 B
  // appears not to.
  const double active = active_parameter_count(model.root);
  EXPECT_DOUBLE_EQ(active, static_cast<double>(expected - 58LL * 248 * expert));
  EXPECT_NEAR((active - 129280.0 * 7168) / 37e9, 1.0, 0.02);
}

TEST(Mla, SixteenBShapeMatchesDeepSeekV2Lite) {
  const ModelSpec model = load_model("deepseek-v3-16b");
  // No query latent: q_proj 2048 · 16 · 192 straight from the input.
  const Module* q = find_module(model.root, "layers.0.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(parameter_count(*q), 2048LL * 16 * 192);
  EXPECT_EQ(find_module(model.root, "layers.0.self_attn.q_a_proj"), nullptr);
  EXPECT_NEAR(static_cast<double>(parameter_count(model.root)) / 15.7e9, 1.0, 0.005);
}

// Per token of context, scores over 192 dims and values over 128 per head: 2 · 128 · 320
// FLOPs forward (before the causal half); the block saves the normed input, both latents
// (normed, with fp32 statistics, and as the up projections' inputs), the 192-wide queries
// and keys and 128-wide values of every head, the log-sum-exp and the attention output.
TEST(Mla, AttentionWorkAndSavedBytes) {
  const ModelSpec model = load_model("deepseek-v3");
  const Module* core = find_module(model.root, "layers.0.self_attn.core_attention");
  ASSERT_NE(core, nullptr);
  EXPECT_DOUBLE_EQ(core->cost.fwd_flops_per_token_ctx, 2.0 * 128 * 320);
  const Module* attention = find_module(model.root, "layers.0.self_attn");
  const BatchShape shape{.micro_batch = 1, .seq_len = 4096};
  const double per_token = 2.0 * 7168                       // q_a_proj's input
                           + (2.0 * 1536 + 4) + 2.0 * 1536  // q latent: norm, q_b_proj's input
                           + (2.0 * 512 + 4) + 2.0 * 512    // kv latent
                           + 2.0 * (2 * 128 * 192 + 128 * 128) + 4.0 * 128  // q, k, v, lse
                           + 2.0 * 128 * 128;                               // o_proj's input
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*attention, shape, Recompute::none), per_token * 4096);
}

TEST(Mla, ModelFileErrors) {
  const nlohmann::json base = {
      {"name", "m"},     {"family", "transformer"}, {"vocab_size", 256},     {"hidden_size", 64},
      {"num_layers", 2}, {"num_heads", 4},          {"ffn_hidden_size", 128}};
  nlohmann::json no_latent = base;
  no_latent["attention"] = "mla";
  no_latent["qk_nope_head_dim"] = 16;
  no_latent["qk_rope_head_dim"] = 8;
  no_latent["v_head_dim"] = 16;
  testing::expect_input_error([&] { model_from_json(no_latent, "m.json"); }, "/kv_lora_rank", "",
                              "m.json");
  nlohmann::json stray = base;
  stray["kv_lora_rank"] = 32;
  testing::expect_input_error([&] { model_from_json(stray, "m.json"); }, "/kv_lora_rank",
                              "only applies with \"attention\": \"mla\"");
  nlohmann::json biased = no_latent;
  biased["kv_lora_rank"] = 32;
  biased["bias"] = true;
  testing::expect_input_error([&] { model_from_json(biased, "m.json"); }, "/bias",
                              "not modelled with multi-head latent attention");
  nlohmann::json grouped = no_latent;
  grouped["kv_lora_rank"] = 32;
  grouped["num_kv_heads"] = 2;
  testing::expect_input_error([&] { model_from_json(grouped, "m.json"); }, "/num_kv_heads",
                              "does not apply to multi-head latent attention");
  nlohmann::json unknown = base;
  unknown["attention"] = "mqa";
  testing::expect_input_error([&] { model_from_json(unknown, "m.json"); }, "/attention",
                              "unknown attention 'mqa'");
}

}  // namespace
}  // namespace shardplan
