// The zoo against published parameter counts (independent references: model cards and
// papers, cited in each zoo file).
#include "models/zoo.h"

#include <gtest/gtest.h>

#include "models/error.h"

namespace shardplan {
namespace {

struct Published {
  const char* name;
  double total;
  double active;  // 0 = same as total
};

class PublishedCount : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedCount, WithinHalfAPercent) {
  const Published p = GetParam();
  const ModelSpec model = load_model(p.name);
  const double total = static_cast<double>(parameter_count(model.root));
  EXPECT_NEAR(total / p.total, 1.0, 0.005) << p.name << ": " << total;
  const double active = p.active > 0 ? p.active : p.total;
  EXPECT_NEAR(active_parameter_count(model.root) / active, 1.0, 0.005) << p.name;
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, PublishedCount,
    ::testing::Values(Published{"llama2-7b", 6.74e9, 0},
                      // Hugging Face safetensors totals: 13,015,864,320
                      // and 68,976,648,192.
                      Published{"llama2-13b", 13.016e9, 0}, Published{"llama2-70b", 68.977e9, 0},
                      // llm-foundry's NumParams at seq_len 2048.
                      Published{"mpt-7b", 6658859008.0, 0}, Published{"mpt-13b", 12853954560.0, 0},
                      Published{"mpt-30b", 29975214080.0, 0},
                      Published{"mpt-70b", 64862437376.0, 0}, Published{"llama3-8b", 8.03e9, 0},
                      Published{"llama3-70b", 70.55e9, 0}, Published{"llama3.1-405b", 405.85e9, 0},
                      Published{"mixtral-8x7b", 46.70e9, 12.88e9},
                      // The checkpoint's 30,532,122,624 (GGUF general.parameter_count);
                      // 3,353,032,704 activated per token (8 of 128 experts).
                      Published{"qwen3-30b-a3b", 30532122624.0, 3353032704.0},
                      Published{"gpt3-175b", 174.6e9, 0}),
    [](const auto& test_info) {
      std::string name = test_info.param.name;
      for (char& c : name) {
        if (c == '-' || c == '.') c = '_';
      }
      return name;
    });

TEST(Zoo, TinyCountWorkedByHand) {
  // vocab 512, hidden 64, 4 layers, 4 heads of 16, 2 kv heads (kv dim 32), ffn 176.
  const int64_t attention = 64 * 64 + 2 * (64 * 32) + 64 * 64;  // q, k, v, o
  const int64_t mlp = 3 * 64 * 176;
  const int64_t norms = 2 * 64;
  const int64_t expected = 4 * (attention + mlp + norms) + 2 * 512 * 64 + 64;
  EXPECT_EQ(parameter_count(load_model("tiny").root), expected);
}

TEST(Zoo, EveryEntryLoadsAndNamesItsSource) {
  const auto names = model_zoo_names();
  ASSERT_EQ(names.size(), 17u);
  for (const std::string& name : names) {
    const ModelSpec model = load_model(name);
    EXPECT_EQ(model.name, name) << "the file stem and the name field must agree";
    EXPECT_GT(model.source.size(), 40u) << name << " must cite where it is published";
    EXPECT_FALSE(model.default_unit_modules.empty());
  }
}

TEST(Zoo, TiedEmbeddingsAreCountedOnce) {
  const ModelSpec gpt3 = load_model("gpt3-175b");
  const Module* head = find_module(gpt3.root, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(head->parameters.empty());
  EXPECT_GT(head->cost.fwd_flops_per_token, 0) << "a tied head still multiplies";
}

TEST(Zoo, UnknownNameSuggestsTheNearest) {
  try {
    load_model("lama3-8b");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--model");
    EXPECT_NE(e.reason().find("did you mean 'llama3-8b'"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find("mixtral-8x7b"), std::string::npos) << "lists the valid names";
  }
}

TEST(Zoo, MissingFileIsAnError) {
  try {
    load_model("/nonexistent/model.json");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "/nonexistent/model.json");
    EXPECT_NE(e.reason().find("cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardplan
