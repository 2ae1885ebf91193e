#include <gtest/gtest.h>

#include "models/error.h"
#include "models/explicit_model.h"
#include "models/model_summary.h"
#include "models/zoo.h"

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
  EXPECT_DOUBLE_EQ(saved_activation_bytes(m.root, shape, Recompute::none), 10 * (2.0 * (8 + 16) + 8));
  const ModelSummary s = summarize_model(m, shape);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].count, 2);
}

TEST(ExplicitModel, ErrorsNameTheJsonPath) {
  auto expect_error = [](const nlohmann::json& j, const std::string& field, const std::string& reason) {
    try {
      model_from_json(j, "m.json");
      ADD_FAILURE() << "accepted " << field;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "m.json");
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = two_linear_model();
  j["root"]["children"][1]["children"][0]["parameters"][0]["shape"] = {16, -8};
  expect_error(j, "/root/children/1/children/0/parameters/0/shape", "must be positive");
  j = two_linear_model();
  j["root"]["children"][1]["children"][1]["name"] = "0";
  expect_error(j, "/root/children/1/children/1/name", "duplicate module 'blocks.0'");
  j = two_linear_model();
  j["root"]["children"][0]["cost"] = {{"kind", "gem"}};
  expect_error(j, "/root/children/0/cost/kind", "did you mean 'gemm'");
  j = two_linear_model();
  j["root"]["children"][0]["cost"] = {{"token_fraction", 1.5}};
  expect_error(j, "/root/children/0/cost/token_fraction", "(0, 1]");
  j = two_linear_model();
  j["root"]["children"][0]["paramters"] = nlohmann::json::array();
  expect_error(j, "/root/children/0/paramters", "did you mean 'parameters'");
  j = two_linear_model();
  j["family"] = "transformr";
  expect_error(j, "/family", "did you mean 'transformer'");
  j = two_linear_model();
  j["root"] = {{"type", "Empty"}};
  expect_error(j, "/root", "no parameters");
}

TEST(TransformerFile, ErrorsNameTheField) {
  const nlohmann::json base = nlohmann::json::parse(R"({"name": "t", "family": "transformer",
      "vocab_size": 100, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "ffn_hidden_size": 128})");
  EXPECT_NO_THROW(model_from_json(base, "t.json"));
  auto expect_error = [&](nlohmann::json j, const std::string& field, const std::string& reason) {
    try {
      model_from_json(j, "t.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = base;
  j.erase("hidden_size");
  expect_error(j, "/hidden_size", "required field is missing");
  j = base;
  j["num_layers"] = -3;
  expect_error(j, "/num_layers", "must be positive");
  j = base;
  j["num_heads"] = 5;
  expect_error(j, "/num_heads", "not divisible");
  j = base;
  j["num_kv_heads"] = 3;
  expect_error(j, "/num_kv_heads", "not a multiple");
  j = base;
  j["mlp"] = "relu";
  expect_error(j, "/mlp", "unknown mlp 'relu'");
  j = base;
  j["hiden_size"] = 64;
  expect_error(j, "/hiden_size", "did you mean 'hidden_size'");
  j = base;
  j["position_embedding"] = "learned";
  expect_error(j, "/max_position_embeddings", "required");
  j = base;
  j["num_experts"] = 8;
  expect_error(j, "/num_experts", "unknown field") ;
  j = base;
  j["family"] = "moe";
  j["num_experts"] = 4;
  j["experts_per_token"] = 5;
  j["moe_ffn_hidden_size"] = 32;
  expect_error(j, "/experts_per_token", "exceeds num_experts");
  j["experts_per_token"] = 2;
  j["moe_layers"] = {0, 2};
  expect_error(j, "/moe_layers", "outside 0..1");
  j["moe_layers"] = {1};
  EXPECT_NO_THROW(model_from_json(j, "t.json"));
  const ModelSpec moe = model_from_json(j, "t.json");
  EXPECT_EQ(find_module(moe.root, "layers.0")->type, "DecoderLayer");
  EXPECT_EQ(find_module(moe.root, "layers.1")->type, "MoEDecoderLayer");
}

}  // namespace
}  // namespace shardplan
