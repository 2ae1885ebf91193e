// Name suggestions, module-name patterns, dtypes and JSON reading.
#include <gtest/gtest.h>

#include "models/dtype.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/module_pattern.h"
#include "models/suggest.h"
#include "models/zoo.h"

namespace shardplan {
namespace {

TEST(Suggest, EditDistanceWorkedExamples) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
  const std::vector<std::string> names = {"dp_shard", "dp_outer", "seq_len"};
  EXPECT_EQ(closest_name("dp_shrad", names), "dp_shard");
  EXPECT_EQ(closest_name("completely_different", names), std::nullopt);
}

TEST(ModulePattern, StarStaysInOneSegment) {
  EXPECT_TRUE(module_name_matches("layers.*", "layers.3"));
  EXPECT_FALSE(module_name_matches("layers.*", "layers.3.mlp"));
  EXPECT_TRUE(module_name_matches("layers.*.mlp", "layers.12.mlp"));
  EXPECT_TRUE(module_name_matches("**.mlp", "model.layers.12.mlp"));
  EXPECT_TRUE(module_name_matches("layers.1*", "layers.17"));
  EXPECT_FALSE(module_name_matches("layers.1*", "layers.2"));
  EXPECT_FALSE(module_name_matches("layers", "layers.0"));
}

TEST(ModulePattern, OutermostMatchesInForwardOrder) {
  const ModelSpec tiny = load_model("tiny");
  const auto matches = match_modules(tiny.root, {"**.mlp", "layers.*"});
  ASSERT_EQ(matches.size(), 4u) << "the mlp lies inside a matched layer";
  EXPECT_EQ(matches[0]->name, "layers.0");
  EXPECT_EQ(matches[3]->name, "layers.3");
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(parse_dtype("bfloat16", "f", "/x"), DType::bf16);
  EXPECT_EQ(dtype_bytes(parse_dtype("fp8", "f", "/x")), 1);
  EXPECT_EQ(dtype_bytes(DType::fp32), 4);
  EXPECT_EQ(dtype_name(DType::fp8_e5m2), "fp8_e5m2");
  EXPECT_THROW(parse_dtype("int4", "f", "/x"), InputError);
}

TEST(JsonReader, SyntaxErrorsGiveLineAndColumn) {
  try {
    parse_json_text("{\n  \"a\": 1,\n  \"b\": ]\n}", "broken.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "broken.json");
    EXPECT_NE(e.reason().find("line 3, column 8"), std::string::npos) << e.what();
  }
}

TEST(JsonReader, TypedAccessNamesThePath) {
  const nlohmann::json j = {{"outer", {{"n", "x"}, {"list", {1, "two"}}}}};
  const JsonReader r(j, "f.json");
  const JsonReader outer = r.object("outer");
  try {
    outer.integer("n");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "f.json: /outer/n: expected an integer, got \"x\"");
  }
  try {
    outer.integers("list");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/outer/list/1");
  }
  EXPECT_EQ(outer.integer_or("missing", 7), 7);
  EXPECT_THROW(JsonReader(nlohmann::json::array(), "f.json"), InputError);
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// The edit distance costs name × candidate: a key of megabytes (a mutated config) took
// seconds per candidate. No name is over 100 bytes, nor a typo of one.
TEST(Suggest, ANameTooLongToBeATypoGetsNoSuggestion) {
  const std::vector<std::string> names = {"micro_batch", "grad_accum"};
  EXPECT_EQ(closest_name("micro_bach", names), "micro_batch");
  EXPECT_EQ(closest_name(std::string(101, 'm'), names), std::nullopt);
  EXPECT_EQ(closest_name(std::string(5'000'000, 'g'), names), std::nullopt);
}

}  // namespace
}  // namespace shardplan
