// A model captured from PyTorch (tests/data/captured_llama_small.json, written by
//   python3 traces/capture/shardplan-capture --file llama_small.py
//       --input int64:2x100:1000 --name llama-small-captured
// from the Llama-style decoder of tests/capture/test_capture.py with vocab 1000, hidden
// 128, 4 layers, 4 heads, 2 KV heads, FFN 352; lm_head and norm registered before the
// layers) goes through every command, without PyTorch: describe, plan, simulate, sweep,
// and execute under mpirun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::ElementsAre;

const std::string kCaptured =
    std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/captured_llama_small.json";

// Parameters by hand: embedding and head 1000 × 128 each; per layer q, o 128 × 128,
// k, v 64 × 128, gate, up 352 × 128, down 128 × 352, two norms of 128; final norm 128.
constexpr int64_t kLayer = 2 * 128 * 128 + 2 * 64 * 128 + 3 * 352 * 128 + 2 * 128;
constexpr int64_t kParameters = 2 * 1000 * 128 + 4 * kLayer + 128;

TEST(CapturedModel, DescribeCountsEveryParameterOnce) {
  const CommandResult r = run_shardplan({"describe", "--model", kCaptured, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["summary"]["total_parameters"], kParameters);
  EXPECT_EQ(j["summary"]["layers"][0]["count"], 4);
  // GEMM FLOPs per token: twice the Linear weights (PaLM's 6N counts 3 × 2N over the
  // step), plus attention; the model FLOPs are at least 6 × the matmul weights.
  const double matmul_weights = 4.0 * (kLayer - 2 * 128) + 1000.0 * 128;
  EXPECT_GE(j["summary"]["model_flops_per_token"].get<double>(), 6.0 * matmul_weights);
}

TEST(CapturedModel, PlanUnitsFollowExecutionNotRegistration) {
  const std::string plan = write_temp_file("captured_plan.json", "");
  const CommandResult r =
      run_shardplan({"plan", "--model", kCaptured, "--gpus", "2", "-o", plan, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(plan);
  const nlohmann::json p = nlohmann::json::parse(in);
  std::vector<std::string> units;
  for (const auto& u : p["units"]) units.push_back(u["name"]);
  EXPECT_THAT(units, ElementsAre("", "layers.0", "layers.1", "layers.2", "layers.3"));
  // The root unit's modules run around the layers: the embedding before, norm and head after.
  std::vector<std::string> forward;
  for (const auto& op : p["ops"])
    if (op["kind"] == "forward" && op["micro_batch"] == 0) forward.push_back(op["name"]);
  EXPECT_THAT(forward, ElementsAre("fwd embed_tokens mb0", "fwd layers.0 mb0", "fwd layers.1 mb0",
                                   "fwd layers.2 mb0", "fwd layers.3 mb0", "fwd norm+lm_head mb0"));
}

TEST(CapturedModel, SimulateAndSweep) {
  const CommandResult s =
      run_shardplan({"simulate", "--model", kCaptured, "--gpus", "8", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_GT(stdout_json(s)["summary"]["step_seconds"].get<double>(), 0);
  const CommandResult w = run_shardplan({"sweep", "--model", kCaptured, "--gpus", "8", "--json"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const nlohmann::json sweep = stdout_json(w);
  EXPECT_GT(sweep["fitting"].get<int64_t>(), 0);
  EXPECT_FALSE(sweep["ranking"].empty());
}

TEST(CapturedModel, ExecutesUnderMpirun) {
  const std::string plan = write_temp_file("captured_plan2.json", "");
  ASSERT_EQ(run_shardplan(
                {"plan", "--model", kCaptured, "--gpus", "2", "--set", "seq_len=256", "-o", plan})
                .exit_code,
            0);
  const CommandResult r =
      run_program("mpirun", {"--allow-run-as-root", "--oversubscribe", "-np", "2", SHARDPLAN_BINARY,
                             "execute", "--plan", plan, "--steps", "1", "--warmup", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("integrity checks: all passed"));
}

}  // namespace
}  // namespace shardplan::testing
