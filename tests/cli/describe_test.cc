// End-to-end tests of `shardplan describe --json`: defaults, flags, and the memory and
// FLOP figures checked against closed forms worked out here from the architectures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

// Runs `describe ... --json` once per distinct argument list and parses the result.
const nlohmann::json& describe(const std::vector<std::string>& args) {
  static std::map<std::vector<std::string>, nlohmann::json> cache;
  if (auto it = cache.find(args); it != cache.end()) return it->second;
  std::vector<std::string> full = {"describe"};
  full.insert(full.end(), args.begin(), args.end());
  full.push_back("--json");
  const CommandResult r = run_shardplan(full);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  return cache[args] = stdout_json(r);
}

double mem(const nlohmann::json& d, const std::string& term) {
  return d.at("memory").at(term).get<double>();
}

// The nine terms describe adds up, persistent then transient.
const std::vector<std::string> kMemoryTerms = {
    "model_weights_bytes",    "main_weights_bytes",   "main_grads_bytes",
    "optimizer_states_bytes", "double_buffers_bytes", "unsharded_weights_bytes",
    "unsharded_grads_bytes",  "activations_bytes",    "non_tensor_bytes"};

double persistent_bytes(const nlohmann::json& d) {
  return mem(d, "model_weights_bytes") + mem(d, "main_weights_bytes") + mem(d, "main_grads_bytes") +
         mem(d, "optimizer_states_bytes");
}

// Llama 3 8B from its config.json: hidden 4096, 32 heads of 128 with 8 KV heads,
// SwiGLU FFN 14336, vocabulary 128256, 32 layers, RMSNorm, untied embeddings.
struct Llama3_8b {
  static constexpr int64_t hidden = 4096;
  static constexpr int64_t kv_dim = 8 * 128;
  static constexpr int64_t ffn = 14336;
  static constexpr int64_t vocab = 128256;
  static constexpr int64_t layers = 32;

  // q and o are hidden × hidden, k and v hidden × kv_dim; gate, up, down; two norms.
  static constexpr int64_t attention = 2 * hidden * hidden + 2 * hidden * kv_dim;
  static constexpr int64_t mlp = 3 * hidden * ffn;
  static constexpr int64_t norms = 2 * hidden;
  static constexpr int64_t layer = attention + mlp + norms;
  // Root FSDP unit: embed_tokens, the final norm and lm_head.
  static constexpr int64_t root = vocab * hidden + hidden + hidden * vocab;
  static constexpr int64_t total = layers * layer + root;

  // Σ over units of ceil(P_u / n): each unit's flat buffer is padded to split evenly.
  static double sharded(int64_t n) {
    const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    return static_cast<double>(ceil_div(root, n) + layers * ceil_div(layer, n));
  }
};

static_assert(Llama3_8b::total == 8'030'261'248);  // 8.03 B on the model card

// ---------------------------------------------------------------------------------------
// Defaults

TEST(DescribeDefaultsTest, ModelClusterAndGpus) {
  const nlohmann::json& d = describe({});
  EXPECT_EQ(d.at("model").at("name"), "llama3-8b");
  EXPECT_EQ(d.at("model").at("family"), "transformer");
  EXPECT_EQ(d.at("model").at("num_layers"), Llama3_8b::layers);
  EXPECT_EQ(d.at("model").at("hidden_size"), Llama3_8b::hidden);
  EXPECT_EQ(d.at("model").at("vocab_size"), Llama3_8b::vocab);
  EXPECT_EQ(d.at("cluster").at("name"), "dgx-h100");
  EXPECT_EQ(d.at("cluster").at("nodes"), 1);
  EXPECT_EQ(d.at("cluster").at("num_gpus"), 8);
  EXPECT_EQ(d.at("memory").at("num_gpus"), 8);
  EXPECT_EQ(d.at("memory").at("dp_shard"), 8);
  EXPECT_EQ(d.at("memory").at("dp_outer"), 1);
  EXPECT_EQ(d.at("memory").at("units"), Llama3_8b::layers + 1);  // layers + root
  EXPECT_EQ(d.at("summary").at("total_parameters").get<int64_t>(), Llama3_8b::total);
}

// Megatron-FSDP's fully_shard defaults (FsdpConfig).
TEST(DescribeDefaultsTest, ConfigDefaults) {
  const nlohmann::json& c = describe({}).at("config");
  EXPECT_EQ(c.at("sharding_strategy"), "optim_grads_params");
  EXPECT_EQ(c.at("dp_shard"), 8);
  EXPECT_EQ(c.at("dp_outer"), 1);
  EXPECT_EQ(c.at("outer_strategy"), "no_shard");
  EXPECT_EQ(c.at("forward_prefetch"), 1);
  EXPECT_EQ(c.at("backward_prefetch"), 1);
  EXPECT_EQ(c.at("async_reduce"), true);
  EXPECT_EQ(c.at("max_live_grad_buffers"), 2);
  EXPECT_EQ(c.at("recompute"), "none");
  EXPECT_EQ(c.at("micro_batch"), 1);
  EXPECT_EQ(c.at("grad_accum"), 1);
  EXPECT_EQ(c.at("seq_len"), 8192);
  EXPECT_EQ(c.at("param_dtype"), "bf16");
  EXPECT_EQ(c.at("main_param_dtype"), "fp32");
  EXPECT_EQ(c.at("main_grad_dtype"), "bf16");
  EXPECT_EQ(c.at("grad_reduce_dtype"), "bf16");
  EXPECT_EQ(c.at("fp8_param_gather"), false);
  EXPECT_FALSE(c.contains("fp8_recipe"));  // only printed with fp8_param_gather
  EXPECT_EQ(c.at("fine_grained_param_gather"), false);
  EXPECT_EQ(c.at("keep_fp8_transpose_cache"), false);
  EXPECT_EQ(c.at("double_buffer"), false);
  EXPECT_EQ(c.at("optimizer"), "adam");
  EXPECT_EQ(c.at("allocator"), "caching");
}

// The total is the sum of its terms and `fits` says whether it is within capacity, for
// a job that fits and one that does not.
class MemoryTotalsTest : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(MemoryTotalsTest, TotalIsSumOfTermsAndFitsFollowsHeadroom) {
  const nlohmann::json& d = describe(GetParam());
  double sum = 0;
  for (const std::string& term : kMemoryTerms) {
    EXPECT_GE(mem(d, term), 0) << term;
    sum += mem(d, term);
  }
  EXPECT_DOUBLE_EQ(mem(d, "total_bytes"), sum);
  EXPECT_DOUBLE_EQ(mem(d, "headroom_bytes"), mem(d, "capacity_bytes") - mem(d, "total_bytes"));
  EXPECT_EQ(d.at("memory").at("fits").get<bool>(), mem(d, "headroom_bytes") >= 0);
  // largest_term names the biggest term.
  std::string largest;
  double largest_bytes = -1;
  const std::map<std::string, std::string> names = {
      {"model_weights_bytes", "model weights"},
      {"main_weights_bytes", "main weights"},
      {"main_grads_bytes", "main grads"},
      {"optimizer_states_bytes", "optimizer states"},
      {"double_buffers_bytes", "double buffers"},
      {"unsharded_weights_bytes", "unsharded weights"},
      {"unsharded_grads_bytes", "unsharded grads"},
      {"activations_bytes", "activations"},
      {"non_tensor_bytes", "non-tensor"}};
  for (const std::string& term : kMemoryTerms) {
    if (mem(d, term) > largest_bytes) {
      largest_bytes = mem(d, term);
      largest = names.at(term);
    }
  }
  EXPECT_EQ(d.at("memory").at("largest_term"), largest);
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, MemoryTotalsTest,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"--set", "sharding_strategy=no_shard"},
                      std::vector<std::string>{"--set", "double_buffer=true"},
                      std::vector<std::string>{"--model", "tiny", "--cluster", "dgx-a100"},
                      // 405 B on one node does not fit.
                      std::vector<std::string>{"--model", "llama3.1-405b"}));

TEST(DescribeDefaultsTest, Llama8bFitsOnOneNodeAndLlama405bDoesNot) {
  const nlohmann::json& small = describe({});
  EXPECT_TRUE(small.at("memory").at("fits").get<bool>());
  EXPECT_GT(mem(small, "headroom_bytes"), 0);
  // 405 B parameters × 16 B of weights, grads and Adam state ÷ 8 GPUs alone is 811 GB.
  const nlohmann::json& big = describe({"--model", "llama3.1-405b"});
  EXPECT_FALSE(big.at("memory").at("fits").get<bool>());
  EXPECT_LT(mem(big, "headroom_bytes"), 0);
  EXPECT_GT(persistent_bytes(big), mem(big, "capacity_bytes"));
}

// ---------------------------------------------------------------------------------------
// Flags

TEST(DescribeFlagsTest, NodesMultipliesGpusPerNode) {
  const nlohmann::json& d = describe({"--nodes", "2"});
  EXPECT_EQ(d.at("cluster").at("nodes"), 2);
  EXPECT_EQ(d.at("cluster").at("num_gpus"), 16);
  EXPECT_EQ(d.at("config").at("dp_shard"), 16);
  EXPECT_EQ(d.at("memory").at("num_gpus"), 16);
  // Twice the shards: the sharded weights halve (both unit sizes divide by 16).
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes") * 2, mem(describe({}), "model_weights_bytes"));
}

TEST(DescribeFlagsTest, GpusSetsAPartialNode) {
  const nlohmann::json& d = describe({"--gpus", "4"});
  EXPECT_EQ(d.at("cluster").at("nodes"), 1);
  EXPECT_EQ(d.at("cluster").at("num_gpus"), 4);
  EXPECT_EQ(d.at("config").at("dp_shard"), 4);
  EXPECT_EQ(d.at("memory").at("dp_shard"), 4);
}

TEST(DescribeFlagsTest, MicroBatchTwoDoublesActivationsExactly) {
  const nlohmann::json& one = describe({"--micro-batch", "1"});
  const nlohmann::json& two = describe({"--micro-batch", "2"});
  EXPECT_EQ(two.at("config").at("micro_batch"), 2);
  EXPECT_GT(mem(one, "activations_bytes"), 0);
  EXPECT_DOUBLE_EQ(mem(two, "activations_bytes"), 2 * mem(one, "activations_bytes"));
  EXPECT_DOUBLE_EQ(two.at("summary").at("total_activation_bytes_none").get<double>(),
                   2 * one.at("summary").at("total_activation_bytes_none").get<double>());
  // Per-token figures and the persistent state do not depend on the batch.
  EXPECT_DOUBLE_EQ(two.at("summary").at("model_flops_per_token").get<double>(),
                   one.at("summary").at("model_flops_per_token").get<double>());
  EXPECT_DOUBLE_EQ(persistent_bytes(two), persistent_bytes(one));
  // Default micro_batch is 1.
  EXPECT_DOUBLE_EQ(mem(describe({}), "activations_bytes"), mem(one, "activations_bytes"));
}

TEST(DescribeFlagsTest, RecomputeLowersActivations) {
  const nlohmann::json& none = describe({"--recompute", "none"});
  const nlohmann::json& selective = describe({"--recompute", "selective"});
  const nlohmann::json& full = describe({"--recompute", "full"});
  EXPECT_EQ(full.at("config").at("recompute"), "full");
  EXPECT_EQ(selective.at("config").at("recompute"), "selective");
  EXPECT_LT(mem(full, "activations_bytes"), mem(selective, "activations_bytes"));
  EXPECT_LT(mem(selective, "activations_bytes"), mem(none, "activations_bytes"));
  // Full recompute costs one more forward of every layer.
  const nlohmann::json& flops = full.at("summary").at("recompute_flops_per_token");
  EXPECT_GT(flops.at("full").get<double>(), flops.at("selective").get<double>());
  EXPECT_EQ(flops.at("none").get<double>(), 0);
  EXPECT_DOUBLE_EQ(persistent_bytes(full), persistent_bytes(none));
}

// torchtitan's per-op policy is a column for models shardplan builds (8h + 2kv + 2F + 4a
// bytes per token per Llama 3 8B layer), absent for captured ones (nothing to count).
TEST(DescribeFlagsTest, SacOpColumnWhereLayersAreBuilt) {
  const nlohmann::json& built = describe({"--model", "llama3-8b", "--seq-len", "8192"});
  const nlohmann::json& layer = built.at("summary").at("layers").at(0);
  EXPECT_DOUBLE_EQ(layer.at("activation_bytes").at("sac_op").get<double>(),
                   (8.0 * 4096 + 2.0 * 1024 + 2.0 * 14336 + 4.0 * 32) * 8192);
  EXPECT_DOUBLE_EQ(built.at("summary").at("recompute_flops_per_token").at("sac_op").get<double>(),
                   32 * 2.0 * (4096.0 * 1024 + 4096.0 * 4096 + 4096.0 * 14336));
  const nlohmann::json& captured = describe(
      {"--model", std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/captured_llama_small.json"});
  EXPECT_FALSE(captured.at("summary").at("layers").at(0).at("activation_bytes").contains("sac_op"));
  EXPECT_FALSE(captured.at("summary").at("recompute_flops_per_token").contains("sac_op"));
}

TEST(DescribeFlagsTest, NoShardRaisesPersistentMemory) {
  const nlohmann::json& zero3 = describe({});
  const nlohmann::json& replicated = describe({"--set", "sharding_strategy=no_shard"});
  EXPECT_EQ(replicated.at("config").at("sharding_strategy"), "no_shard");
  EXPECT_GT(persistent_bytes(replicated), persistent_bytes(zero3));
  // Nothing is gathered or reduce-scattered without sharding.
  EXPECT_EQ(mem(replicated, "unsharded_weights_bytes"), 0);
  EXPECT_EQ(mem(replicated, "unsharded_grads_bytes"), 0);
  EXPECT_GT(mem(zero3, "unsharded_weights_bytes"), 0);
}

TEST(DescribeFlagsTest, ConfigFileIsRead) {
  const std::string file = write_temp_file("describe_config.json", R"({
    "sharding_strategy": "optim_grads",
    "micro_batch": 2,
    "recompute": "selective",
    "forward_prefetch": 2,
    "max_live_grad_buffers": 3,
    "main_grad_dtype": "fp32",
    "optimizer": "sgd",
    "allocator": "pool"
  })");
  const nlohmann::json& d = describe({"--config", file});
  const nlohmann::json& c = d.at("config");
  EXPECT_EQ(c.at("sharding_strategy"), "optim_grads");
  EXPECT_EQ(c.at("micro_batch"), 2);
  EXPECT_EQ(c.at("recompute"), "selective");
  EXPECT_EQ(c.at("forward_prefetch"), 2);
  EXPECT_EQ(c.at("backward_prefetch"), 1);
  EXPECT_EQ(c.at("max_live_grad_buffers"), 3);
  EXPECT_EQ(c.at("main_grad_dtype"), "fp32");
  // The reduction follows the main grads unless set.
  EXPECT_EQ(c.at("grad_reduce_dtype"), "fp32");
  EXPECT_EQ(c.at("optimizer"), "sgd");
  EXPECT_EQ(c.at("allocator"), "pool");
  // The memory follows the file: fp32 main grads sharded 8 ways, SGD's one fp32 state.
  EXPECT_DOUBLE_EQ(mem(d, "main_grads_bytes"), 4 * Llama3_8b::sharded(8));
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 4 * Llama3_8b::sharded(8));
  // optim_grads keeps the full bf16 weights.
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2.0 * Llama3_8b::total);
}

TEST(DescribeFlagsTest, SetOverridesTheConfigFile) {
  const std::string file = write_temp_file("describe_config_override.json",
                                           R"({"micro_batch": 2, "recompute": "full"})");
  const nlohmann::json& from_file = describe({"--config", file});
  EXPECT_EQ(from_file.at("config").at("micro_batch"), 2);
  const nlohmann::json& overridden = describe({"--config", file, "--set", "micro_batch=3"});
  EXPECT_EQ(overridden.at("config").at("micro_batch"), 3);
  EXPECT_EQ(overridden.at("config").at("recompute"), "full");  // the rest of the file stays
  EXPECT_DOUBLE_EQ(mem(overridden, "activations_bytes") * 2,
                   mem(from_file, "activations_bytes") * 3);
}

TEST(DescribeFlagsTest, SetTakesJsonValuesAndBareStrings) {
  const nlohmann::json& d =
      describe({"--set", "unit_modules=[\"layers.*\"]", "--set", "recompute=\"selective\"", "--set",
                "param_dtype=fp16", "--set", "async_reduce=false"});
  const nlohmann::json& c = d.at("config");
  EXPECT_EQ(c.at("unit_modules"), nlohmann::json::array({"layers.*"}));
  EXPECT_EQ(c.at("recompute"), "selective");
  EXPECT_EQ(c.at("param_dtype"), "fp16");
  EXPECT_EQ(c.at("main_grad_dtype"), "fp16");  // main grads follow the parameter dtype
  EXPECT_EQ(c.at("async_reduce"), false);
}

TEST(DescribeFlagsTest, Gpt3AcceptsItsOwnContextLength) {
  const nlohmann::json& d = describe({"--model", "gpt3-175b", "--seq-len", "2048"});
  EXPECT_EQ(d.at("config").at("seq_len"), 2048);
  EXPECT_EQ(d.at("model").at("name"), "gpt3-175b");
}

// ---------------------------------------------------------------------------------------
// Memory against the closed form (DESIGN.md memory table), Llama 3 8B worked out above.

using StrategyAndGpus = std::tuple<std::string, int64_t>;

class ShardedStateTest : public ::testing::TestWithParam<StrategyAndGpus> {};

TEST_P(ShardedStateTest, PersistentBytesMatchClosedForm) {
  const auto& [strategy, gpus] = GetParam();
  const nlohmann::json& d =
      describe({"--gpus", std::to_string(gpus), "--set", "sharding_strategy=" + strategy});
  ASSERT_EQ(d.at("config").at("dp_shard"), gpus);

  const double full = static_cast<double>(Llama3_8b::total);
  const double shard = Llama3_8b::sharded(gpus);
  const bool zero1 = strategy != "no_shard";
  const bool zero2 = strategy == "optim_grads" || strategy == "optim_grads_params";
  const bool zero3 = strategy == "optim_grads_params";

  // bf16 weights and main grads (2 B), fp32 main weights (4 B), two fp32 Adam states (8 B).
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2 * (zero3 ? shard : full));
  EXPECT_DOUBLE_EQ(mem(d, "main_grads_bytes"), 2 * (zero2 ? shard : full));
  EXPECT_DOUBLE_EQ(mem(d, "main_weights_bytes"), 4 * (zero1 ? shard : full));
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8 * (zero1 ? shard : full));
  // Transient unsharded buffers exist only for what is sharded.
  EXPECT_EQ(mem(d, "unsharded_weights_bytes") > 0, zero3);
  EXPECT_EQ(mem(d, "unsharded_grads_bytes") > 0, zero2);
  EXPECT_EQ(d.at("memory").at("largest_unit_parameters").get<int64_t>(), Llama3_8b::root);
}

INSTANTIATE_TEST_SUITE_P(Llama3_8b, ShardedStateTest,
                         // 8 splits every unit evenly; 7 needs the per-unit padding.
                         ::testing::Combine(::testing::Values("no_shard", "optim", "optim_grads",
                                                              "optim_grads_params"),
                                            ::testing::Values(int64_t{8}, int64_t{7})),
                         [](const ::testing::TestParamInfo<StrategyAndGpus>& param_info) {
                           return std::get<0>(param_info.param) + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "gpus";
                         });

TEST(ShardedStateTest, SixteenGpusOnTwoNodes) {
  const nlohmann::json& d = describe({"--nodes", "2"});
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2 * Llama3_8b::sharded(16));
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8 * Llama3_8b::sharded(16));
}

// The brief's worked example: bf16 × Σ_u ceil(P_u / 8) over 32 layers and the root.
TEST(ShardedStateTest, Llama8bOnEightGpusWorkedExample) {
  const nlohmann::json& d = describe({});
  const double per_rank = static_cast<double>((Llama3_8b::root + 7) / 8) +
                          32.0 * static_cast<double>((Llama3_8b::layer + 7) / 8);
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2 * per_rank);
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8 * per_rank);
  const nlohmann::json& replicated = describe({"--set", "sharding_strategy=no_shard"});
  EXPECT_DOUBLE_EQ(mem(replicated, "model_weights_bytes"), 2.0 * Llama3_8b::total);
  EXPECT_DOUBLE_EQ(mem(replicated, "optimizer_states_bytes"), 8.0 * Llama3_8b::total);
}

// Each extra unit prefetched keeps one more gathered bf16 layer.
TEST(ShardedStateTest, PrefetchDepthAddsOneGatheredLayer) {
  const nlohmann::json& depth1 = describe({});
  const nlohmann::json& depth2 =
      describe({"--set", "forward_prefetch=2", "--set", "backward_prefetch=2"});
  EXPECT_DOUBLE_EQ(mem(depth2, "unsharded_weights_bytes") - mem(depth1, "unsharded_weights_bytes"),
                   2.0 * Llama3_8b::layer);
  // The root stays gathered: it is in the buffer at every depth.
  const nlohmann::json& depth0 =
      describe({"--set", "forward_prefetch=0", "--set", "backward_prefetch=0"});
  EXPECT_DOUBLE_EQ(mem(depth0, "unsharded_weights_bytes"),
                   2.0 * (Llama3_8b::root + Llama3_8b::layer));
}

// HSDP: weights shard over dp_shard, and outer_strategy optim shards the optimizer over
// all dp_shard × dp_outer ranks.
TEST(ShardedStateTest, HsdpShardsOptimizerOverAllRanks) {
  const nlohmann::json& d = describe({"--set", "dp_outer=2", "--set", "outer_strategy=optim"});
  EXPECT_EQ(d.at("config").at("dp_shard"), 4);
  EXPECT_EQ(d.at("memory").at("dp_outer"), 2);
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2 * Llama3_8b::sharded(4));
  EXPECT_DOUBLE_EQ(mem(d, "main_grads_bytes"), 2 * Llama3_8b::sharded(4));
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8 * Llama3_8b::sharded(8));
  EXPECT_DOUBLE_EQ(mem(d, "main_weights_bytes"), 4 * Llama3_8b::sharded(8));
}

// FP8 gather keeps 1-byte weights, with the fp32 main copy.
TEST(ShardedStateTest, Fp8ParamGatherHalvesTheWeights) {
  const nlohmann::json& d = describe({"--set", "fp8_param_gather=true"});
  EXPECT_EQ(d.at("config").at("fp8_recipe"), "delayed");
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), Llama3_8b::sharded(8));
  EXPECT_DOUBLE_EQ(mem(d, "main_weights_bytes"), 4 * Llama3_8b::sharded(8));
  const nlohmann::json& mx =
      describe({"--set", "fp8_param_gather=true", "--set", "fp8_recipe=mxfp8"});
  EXPECT_DOUBLE_EQ(mem(mx, "model_weights_bytes"), 2 * Llama3_8b::sharded(8));
}

// ---------------------------------------------------------------------------------------
// FLOPs: PaLM's model-FLOPs convention (Chowdhery et al. 2022, appendix B): 6 FLOPs per
// matmul weight per token, plus 12·L·d_attn·s for attention scores and values.

TEST(DescribeFlopsTest, Llama8bModelFlopsFollowPalmConvention) {
  const nlohmann::json& d = describe({});
  const int64_t embedding = Llama3_8b::vocab * Llama3_8b::hidden;  // a lookup, no matmul
  const int64_t norm_weights = Llama3_8b::layers * Llama3_8b::norms + Llama3_8b::hidden;
  const double matmul_weights = static_cast<double>(Llama3_8b::total - embedding - norm_weights);
  const double attention = 12.0 * Llama3_8b::layers * Llama3_8b::hidden * 8192;
  EXPECT_DOUBLE_EQ(d.at("summary").at("model_flops_per_token").get<double>(),
                   6 * matmul_weights + attention);
  // Executed FLOPs discount the causal half of attention but pay flash's recompute.
  EXPECT_GT(d.at("summary").at("executed_flops_per_token").get<double>(), 0);
}

TEST(DescribeSummaryTest, ParameterKindsAndLayersAddUp) {
  for (const std::string model : {"llama3-8b", "mixtral-8x7b", "tiny"}) {
    const nlohmann::json& s = describe({"--model", model}).at("summary");
    int64_t by_kind = 0;
    for (const auto& [kind, count] : s.at("parameters_by_kind").items()) {
      by_kind += count.get<int64_t>();
    }
    EXPECT_EQ(by_kind, s.at("total_parameters").get<int64_t>()) << model;
    double layers_none = 0;
    for (const nlohmann::json& l : s.at("layers")) {
      layers_none += static_cast<double>(l.at("count").get<int64_t>()) *
                     l.at("activation_bytes").at("none").get<double>();
    }
    EXPECT_DOUBLE_EQ(layers_none + s.at("other_activation_bytes").get<double>(),
                     s.at("total_activation_bytes_none").get<double>())
        << model;
  }
}

// ---------------------------------------------------------------------------------------
// An explicit-form model: a module tree written out, as a capture from PyTorch would be.

struct Leaf {
  std::string block;  // "" = directly under the root
  std::string name;
  std::string type;
  std::vector<std::vector<int64_t>> shapes;
  double custom_fwd_flops = -1;  // >= 0: the leaf states its own cost
};

const std::vector<Leaf>& explicit_leaves() {
  static const std::vector<Leaf> leaves = {
      {"", "embed", "Embedding", {{100, 32}}},
      {"0", "up", "Linear", {{64, 32}, {64}}},  // weight [out, in] and bias
      {"0", "down", "Linear", {{32, 64}}},
      {"1", "up", "Linear", {{48, 32}}},
      {"1", "scale", "Scale", {{3, 5, 7}}},
      {"1", "custom", "Linear", {{32, 48}}, 1000},
      {"", "head", "Linear", {{100, 32}}},
  };
  return leaves;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

nlohmann::json leaf_json(const Leaf& leaf) {
  nlohmann::json params = nlohmann::json::array();
  for (std::size_t i = 0; i < leaf.shapes.size(); ++i) {
    params.push_back({{"name", i == 0 ? "weight" : "bias"},
                      {"shape", leaf.shapes[i]},
                      {"dtype", leaf.type == "Scale" ? "fp32" : "bf16"}});
  }
  nlohmann::json j = {{"name", leaf.name}, {"type", leaf.type}, {"parameters", params}};
  if (leaf.custom_fwd_flops >= 0) {
    j["cost"] = {{"kind", "gemm"}, {"fwd_flops_per_token", leaf.custom_fwd_flops}};
  }
  return j;
}

std::string explicit_model_file() {
  nlohmann::json blocks = {{"name", "blocks"}, {"type", "ModuleList"}, {"children", {}}};
  std::map<std::string, nlohmann::json> block_json;
  nlohmann::json root_children = nlohmann::json::array();
  for (const Leaf& leaf : explicit_leaves()) {
    if (leaf.block.empty()) continue;
    auto& b = block_json[leaf.block];
    if (b.is_null())
      b = {{"name", leaf.block}, {"type", "Block"}, {"children", nlohmann::json::array()}};
    b["children"].push_back(leaf_json(leaf));
  }
  blocks["children"] = nlohmann::json::array();
  for (const auto& [name, b] : block_json) blocks["children"].push_back(b);
  root_children.push_back(leaf_json(explicit_leaves()[0]));  // embed
  root_children.push_back(blocks);
  root_children.push_back(leaf_json(explicit_leaves().back()));  // head
  const nlohmann::json model = {{"name", "toy-explicit"},
                                {"family", "explicit"},
                                {"default_unit_modules", {"blocks.*"}},
                                {"hidden_size", 32},
                                {"root", {{"type", "Toy"}, {"children", root_children}}}};
  return write_temp_file("toy_explicit.json", model.dump(2));
}

TEST(ExplicitModelTest, ParametersAndFlopsFollowTheTree) {
  int64_t total = 0;
  double fwd_flops = 0;
  for (const Leaf& leaf : explicit_leaves()) {
    for (const auto& shape : leaf.shapes) total += numel(shape);
    if (leaf.custom_fwd_flops >= 0) {
      fwd_flops += leaf.custom_fwd_flops;
    } else if (leaf.type == "Linear") {
      // A Linear with no stated cost: 2·in·out per token from its weight [out, in].
      fwd_flops += 2.0 * static_cast<double>(leaf.shapes[0][0] * leaf.shapes[0][1]);
    }
  }
  ASSERT_EQ(total, 13737);  // the table above, summed by hand

  const nlohmann::json& d = describe({"--model", explicit_model_file()});
  EXPECT_EQ(d.at("model").at("name"), "toy-explicit");
  EXPECT_EQ(d.at("model").at("family"), "explicit");
  EXPECT_EQ(d.at("summary").at("total_parameters").get<int64_t>(), total);
  EXPECT_DOUBLE_EQ(d.at("summary").at("active_parameters").get<double>(),
                   static_cast<double>(total));
  // Forward, then backward at twice the forward: 3× (no attention context terms).
  EXPECT_DOUBLE_EQ(d.at("summary").at("model_flops_per_token").get<double>(), 3 * fwd_flops);
  EXPECT_DOUBLE_EQ(d.at("summary").at("executed_flops_per_token").get<double>(), 3 * fwd_flops);
}

TEST(ExplicitModelTest, UnitsComeFromDefaultUnitModulesWithPadding) {
  std::map<std::string, int64_t> unit_params;  // "" = root unit
  for (const Leaf& leaf : explicit_leaves()) {
    for (const auto& shape : leaf.shapes) unit_params[leaf.block] += numel(shape);
  }
  ASSERT_EQ(unit_params.size(), 3u);
  ASSERT_NE(unit_params.at("1") % 8, 0);  // block 1 needs padding on 8 GPUs
  double per_rank = 0;
  for (const auto& [unit, p] : unit_params) per_rank += static_cast<double>((p + 7) / 8);

  const nlohmann::json& d = describe({"--model", explicit_model_file()});
  EXPECT_EQ(d.at("memory").at("units"), 3);
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2 * per_rank);
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8 * per_rank);
  EXPECT_EQ(d.at("memory").at("largest_unit_parameters").get<int64_t>(),
            std::max({unit_params.at(""), unit_params.at("0"), unit_params.at("1")}));
}

// summary.layers groups layers of one type; count × parameters must still add up to the
// parameters in layers when the layers of a type differ.
TEST(ExplicitModelTest, LayerSummaryAddsUpForUnequalLayersOfOneType) {
  int64_t in_blocks = 0;
  for (const Leaf& leaf : explicit_leaves()) {
    if (leaf.block.empty()) continue;
    for (const auto& shape : leaf.shapes) in_blocks += numel(shape);
  }
  const nlohmann::json& s = describe({"--model", explicit_model_file()}).at("summary");
  int64_t summarised = 0;
  for (const nlohmann::json& l : s.at("layers")) {
    summarised += l.at("count").get<int64_t>() * l.at("parameters").get<int64_t>();
  }
  EXPECT_EQ(summarised, in_blocks);
}

// A frozen parameter (requires_grad false) has no gradient and no optimizer state.
TEST(ExplicitModelTest, FrozenParametersHaveNoGradsOrOptimizerState) {
  const std::string file = write_temp_file("frozen_explicit.json", R"({
    "name": "frozen", "family": "explicit",
    "root": {"children": [
      {"name": "trained", "type": "Linear",
       "parameters": [{"name": "weight", "shape": [4, 4]}]},
      {"name": "frozen", "type": "Linear",
       "parameters": [{"name": "weight", "shape": [8, 8], "requires_grad": false}]}]}})");
  const nlohmann::json& d = describe({"--model", file, "--gpus", "1"});
  ASSERT_EQ(d.at("summary").at("total_parameters"), 16 + 64);
  EXPECT_DOUBLE_EQ(mem(d, "model_weights_bytes"), 2.0 * (16 + 64));
  EXPECT_DOUBLE_EQ(mem(d, "optimizer_states_bytes"), 8.0 * 16);
  EXPECT_DOUBLE_EQ(mem(d, "main_grads_bytes"), 2.0 * 16);
}

// ---------------------------------------------------------------------------------------
// Sizes too large to represent must be rejected, not wrap around.

TEST(DescribeOverflowTest, HugeMicroBatchTimesSeqLenIsRejected) {
  // 2^62 × 4 tokens overflow int64.
  const CommandResult r = run_shardplan({"describe", "--model", "tiny", "--micro-batch",
                                         "4611686018427387904", "--seq-len", "4", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, ::testing::ContainsRegex("micro_batch|micro-batch|seq_len|seq-len"));
}

}  // namespace
}  // namespace shardplan::testing
