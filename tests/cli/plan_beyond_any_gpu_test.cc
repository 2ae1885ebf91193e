// `shardplan plan` of a job no GPU could hold: a clear error naming the bound (the plan
// validator's plan_limits), not an internal error about an invalid plan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

// A Llama-shaped model with hidden size 2^20: its layers' optimizer state alone is tens of
// TiB on one GPU, past the largest GPU memory a plan may name (16 TiB).
TEST(PlanBeyondAnyGpu, IsAnInputErrorNamingTheBound) {
  const nlohmann::json model = {{"name", "wide"},
                                {"family", "transformer"},
                                {"vocab_size", 32000},
                                {"hidden_size", 1 << 20},
                                {"num_layers", 2},
                                {"num_heads", 1024},
                                {"num_kv_heads", 1024},
                                {"ffn_hidden_size", 1 << 21},
                                {"mlp", "swiglu"},
                                {"norm", "rmsnorm"},
                                {"tie_embeddings", false},
                                {"bias", false},
                                {"position_embedding", "rope"}};
  const std::string path = write_temp_file("wide_model.json", model.dump());
  const CommandResult r =
      run_shardplan({"plan", "--model", path, "--gpus", "1", "--set", "seq_len=4096"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("shardplan: error: plan: "));
  EXPECT_THAT(r.err, HasSubstr("17592186044416"));
  EXPECT_THAT(r.err, HasSubstr("the job is beyond any GPU"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("internal error")));
}

}  // namespace
}  // namespace shardplan::testing
