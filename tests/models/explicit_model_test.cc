#include "models/explicit_model.h"

#include <gtest/gtest.h>

#include "models/error.h"
#include "models/model_summary.h"
#include "models/zoo.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

TEST(ExplicitModel, ZooModelsRoundTrip) {
  for (const char* name : {"tiny", "mixtral-8x7b", "gpt3-175b"}) {
    const ModelSpec original = load_model(name);
    const nlohmann::json written = model_to_explicit_json(original);
    const ModelSpec read = model_from_json(written, "roundtrip.json");
    EXPECT_EQ(read.family, "explicit");
    EXPECT_EQ(parameter_count(read.root), parameter_count(original.root)) << name;
    EXPECT_DOUBLE_EQ(active_parameter_count(read.root), active_parameter_count(original.root));
    const BatchShape shape{.micro_batch = 2, .seq_len = 1024};
    EXPECT_DOUBLE_EQ(forward_flops(read.root, shape), forward_flops(original.root, shape));
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      EXPECT_DOUBLE_EQ(saved_activation_bytes(read.root, shape, r),
                       saved_activation_bytes(original.root, shape, r));
    }
    EXPECT_EQ(model_to_explicit_json(read), written) << "writing is stable";
    ASSERT_NE(find_module(read.root, "layers.1.self_attn.q_proj"), nullptr);
  }
}

nlohmann::json two_linear_model() {
  return nlohmann::json::parse(R"({
    "name": "mlp", "family": "explicit", "default_unit_modules": ["blocks.*"],
    "root": {"type": "Net", "children": [
      {"name": "embed", "type": "Embedding", "parameters": [{"name": "weight", "shape": [100, 8]}]},
      {"name": "blocks", "type": "ModuleList", "children": [
        {"name": "0", "type": "Linear", "parameters": [{"name": "weight", "shape": [16, 8]},
                                                        {"name": "bias", "shape": [16]}]},
        {"name": "1", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 16], "dtype": "fp32"}]}
      ]}
    ]}})");
}

TEST(ExplicitModel, LinearLeavesGetDefaultCosts) {
  const ModelSpec m = model_from_json(two_linear_model(), "mlp.json");
  EXPECT_EQ(parameter_count(m.root), 800 + 128 + 16 + 128);
  const Module* second = find_module(m.root, "blocks.1");
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->parameters[0].dtype, DType::fp32);
  const BatchShape shape{.micro_batch = 1, .seq_len = 10};
  EXPECT_DOUBLE_EQ(forward_flops(m.root, shape), 10 * (2.0 * 8 * 16 + 2.0 * 16 * 8));
  // Inputs saved: 8 and 16 bf16 elements, and the embedding's int64 ids.
  EXPECT_DOUBLE_EQ(saved_activation_bytes(m.root, shape, Recompute::none),
                   10 * (2.0 * (8 + 16) + 8));
  const ModelSummary s = summarize_model(m, shape);
  // The two blocks differ in size, so they are summarised apart.
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].count, 1);
  EXPECT_EQ(s.layers[0].parameters, 128 + 16);
  EXPECT_EQ(s.layers[1].parameters, 128);
}

struct BadModel {
  const char* name;
  nlohmann::json patch;  // JSON merge patch on the good model (null deletes a key)
  const char* field;
  const char* reason;
};

void PrintTo(const BadModel& bad, std::ostream* os) {
  *os << bad.name;
}

nlohmann::json patched(nlohmann::json base, const nlohmann::json& patch) {
  base.merge_patch(patch);
  return base;
}

class RejectsBadExplicitModel : public ::testing::TestWithParam<BadModel> {};

TEST_P(RejectsBadExplicitModel, NamesTheJsonPath) {
  const BadModel& bad = GetParam();
  nlohmann::json j = two_linear_model();
  // Patches address the first block's first parameter or the embedding by path.
  for (const auto& [pointer, value] : bad.patch.items()) {
    if (value.is_null()) {
      j[nlohmann::json::json_pointer(pointer).parent_pointer()].erase(
          nlohmann::json::json_pointer(pointer).back());
    } else {
      j[nlohmann::json::json_pointer(pointer)] = value;
    }
  }
  testing::expect_input_error([&] { model_from_json(j, "m.json"); }, bad.field, bad.reason,
                              "m.json");
}

INSTANTIATE_TEST_SUITE_P(
    ExplicitModel, RejectsBadExplicitModel,
    ::testing::Values(
        BadModel{"negative_dim",
                 {{"/root/children/1/children/0/parameters/0/shape", {16, -8}}},
                 "/root/children/1/children/0/parameters/0/shape",
                 "must be positive"},
        BadModel{"duplicate_module",
                 {{"/root/children/1/children/1/name", "0"}},
                 "/root/children/1/children/1/name",
                 "duplicate module 'blocks.0'"},
        BadModel{"bad_kind",
                 {{"/root/children/0/cost", {{"kind", "gem"}}}},
                 "/root/children/0/cost/kind",
                 "did you mean 'gemm'"},
        BadModel{"token_fraction",
                 {{"/root/children/0/cost", {{"token_fraction", 5000}}}},
                 "/root/children/0/cost/token_fraction",
                 "(0, 4096]"},
        BadModel{"stacked_experts_shape",
                 {{"/root/children/0/stacked_experts", 4}},
                 "/root/children/0/stacked_experts",
                 "must stack 4 experts along its first dimension"},
        BadModel{"misspelt_key",
                 {{"/root/children/0/paramters", nlohmann::json::array()}},
                 "/root/children/0/paramters",
                 "did you mean 'parameters'"},
        BadModel{
            "bad_family", {{"/family", "transformr"}}, "/family", "did you mean 'transformer'"},
        BadModel{"no_parameters",
                 {{"/root/children", nlohmann::json::array()}},
                 "/root",
                 "no parameters"},
        BadModel{"missing_name", {{"/name", nullptr}}, "/name", "required field is missing"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

const nlohmann::json kSmallTransformer =
    nlohmann::json::parse(R"({"name": "t", "family": "transformer",
    "vocab_size": 100, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "ffn_hidden_size": 128})");

class RejectsBadTransformer : public ::testing::TestWithParam<BadModel> {};

TEST_P(RejectsBadTransformer, NamesTheField) {
  const BadModel& bad = GetParam();
  testing::expect_input_error(
      [&] { model_from_json(patched(kSmallTransformer, bad.patch), "t.json"); }, bad.field,
      bad.reason, "t.json");
}

const nlohmann::json kMoe = {
    {"family", "moe"}, {"num_experts", 4}, {"experts_per_token", 2}, {"moe_ffn_hidden_size", 32}};

INSTANTIATE_TEST_SUITE_P(
    TransformerFile, RejectsBadTransformer,
    ::testing::Values(
        BadModel{"missing_hidden",
                 {{"hidden_size", nullptr}},
                 "/hidden_size",
                 "required field is missing"},
        BadModel{"negative_layers", {{"num_layers", -3}}, "/num_layers", "must be positive"},
        BadModel{"zero_vocab", {{"vocab_size", 0}}, "/vocab_size", "must be positive"},
        BadModel{"heads_do_not_divide", {{"num_heads", 5}}, "/num_heads", "not divisible"},
        BadModel{"kv_heads", {{"num_kv_heads", 3}}, "/num_kv_heads", "not a multiple"},
        BadModel{"mlp", {{"mlp", "relu"}}, "/mlp", "unknown mlp 'relu'"},
        BadModel{"misspelt_key", {{"hiden_size", 64}}, "/hiden_size", "did you mean 'hidden_size'"},
        BadModel{"learned_without_size",
                 {{"position_embedding", "learned"}},
                 "/max_position_embeddings",
                 "required"},
        BadModel{"moe_field_on_dense", {{"num_experts", 8}}, "/num_experts", "unknown field"},
        BadModel{"too_many_routed", patched(kMoe, {{"experts_per_token", 5}}), "/experts_per_token",
                 "exceeds num_experts"},
        BadModel{"moe_layer_out_of_range", patched(kMoe, {{"moe_layers", {0, 2}}}), "/moe_layers",
                 "outside 0..1"},
        BadModel{"bad_dtype", {{"dtype", "bf61"}}, "/dtype", "unknown dtype"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(TransformerFile, MoeLayersPickWhichLayersAreSparse) {
  const ModelSpec moe =
      model_from_json(patched(kSmallTransformer, patched(kMoe, {{"moe_layers", {1}}})), "t.json");
  EXPECT_EQ(find_module(moe.root, "layers.0")->type, "DecoderLayer");
  EXPECT_EQ(find_module(moe.root, "layers.1")->type, "MoEDecoderLayer");
  // Its experts run as grouped GEMMs: each weight stacks them along its first dimension.
  const Module* down = find_module(moe.root, "layers.1.mlp.experts.down_proj");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->stacked_experts, kMoe["num_experts"].get<int64_t>());
  EXPECT_EQ(down->parameters.front().shape.front(), kMoe["num_experts"].get<int64_t>());
}

}  // namespace
}  // namespace shardplan
