// Inputs real users write that an earlier reader got wrong: a launch script's layout,
// Bridge's dataclass defaults, legacy Megatron spellings, and inputs that must fail cleanly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("shardplan_review_" + name);
  std::ofstream(path) << text;
  return path.string();
}

bool contains(const std::vector<std::string>& list, const std::string& text) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

const std::string kModel =
    "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
    "--max-position-embeddings 1024 --micro-batch-size 2 --vocab-size 32000 ";

// Megatron's own scripts (examples/gpt3/train_gpt3_175b_distributed.sh) define their
// arrays first and launch last: the flags count wherever they stand.
TEST(LaunchScript, ArraysBeforeTheTorchrunLine) {
  const StackJob job = read_megatron_args(write_file(
      "script.sh",
      "#!/bin/bash\nGPUS_PER_NODE=8\nDISTRIBUTED_ARGS=(\n  --nproc_per_node 8\n  --nnodes 2\n)\n"
      "GPT_MODEL_ARGS=(\n  " +
          kModel +
          "\n)\n"
          "PERF_ARGS=( --bf16 --use-megatron-fsdp --recompute-granularity selective )\n"
          "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} "
          "\"${PERF_ARGS[@]}\"\n"));
  EXPECT_EQ(job.gpus, 16);
  EXPECT_EQ(job.config["param_dtype"], "bf16");
  EXPECT_EQ(job.config["sharding_strategy"], "optim_grads_params");
  EXPECT_EQ(job.config["recompute"], "selective");
  EXPECT_TRUE(job.unknown.empty());
}

TEST(LaunchScript, LauncherValuesItCannotCountAreNotes) {
  const StackJob job =
      read_megatron_args("torchrun --nproc-per-node gpu --nnodes 1:4 pretrain_gpt.py " + kModel);
  EXPECT_FALSE(job.gpus.has_value());
  EXPECT_TRUE(contains(job.not_modelled, "--nproc-per-node gpu --nnodes 1:4"));
}

TEST(MegatronLegacy, OldSpellingsAndIgnoredExpertFlags) {
  const StackJob job = read_megatron_args(
      kModel +
      "--recompute-activations --use-rotary-position-embeddings --cp-comm-type p2p "
      "--moe-token-dispatcher-type alltoall --expert-tensor-parallel-size 1");
  EXPECT_EQ(job.config["recompute"], "selective");
  EXPECT_EQ(job.model["position_embedding"], "rope");
  EXPECT_FALSE(job.config.contains("cp_comm"));         // cp 1: Megatron's default, unused
  EXPECT_FALSE(job.config.contains("moe_dispatcher"));  // no experts
  JobParams p;
  p.from_megatron = kModel + "--cp-comm-type p2p --moe-token-dispatcher-type alltoall";
  EXPECT_NO_THROW(load_job(p));
}

TEST(BridgeDefaults, DataclassDefaultsNotTheCommandLines) {
  const StackJob job = read_megatron_bridge(write_file(
      "defaults.py",
      "cfg.model.num_layers = 2\ncfg.model.hidden_size = 1024\ncfg.model.num_attention_heads = 16\n"
      "cfg.model.gated_linear_unit = True\ncfg.model.seq_length = 2048\n"
      "cfg.model.vocab_size = 50257\ncfg.tokenizer.vocab_size = 50000\n"
      "cfg.train.micro_batch_size = 1\ncfg.ddp.use_megatron_fsdp = True\n"
      "cfg.ddp.use_distributed_optimizer = True\ncfg.optimizer.use_distributed_optimizer = "
      "False\n"));
  EXPECT_EQ(job.config["sharding_strategy"], "no_shard");  // DistributedDataParallelConfig's
  EXPECT_EQ(job.model["vocab_size"], 50257);               // should_pad_vocab False; model's wins
  EXPECT_EQ(job.model["ffn_hidden_size"], 4 * 1024);       // TransformerConfig: 4h
  EXPECT_EQ(job.model["position_embedding"], "learned");
  EXPECT_EQ(job.model["max_position_embeddings"], 2048);  // GPTModelProvider: seq_length
  EXPECT_EQ(job.config["async_reduce"], true);            // CommOverlapConfig, the recipes
  EXPECT_FALSE(job.config.contains("forward_prefetch"));
}

TEST(BridgeDefaults, ExpertLayersAsAListAndCommOverlap) {
  const std::string head =
      "cfg.model.num_layers = 3\ncfg.model.hidden_size = 256\ncfg.model.num_attention_heads = 4\n"
      "cfg.model.seq_length = 128\ncfg.model.position_embedding_type = 'rope'\n"
      "cfg.model.vocab_size = 1024\ncfg.train.micro_batch_size = 1\ncfg.model.num_moe_experts = 4\n"
      "cfg.model.moe_ffn_hidden_size = 128\ncfg.comm_overlap.overlap_grad_reduce = False\n";
  const StackJob python =
      read_megatron_bridge(write_file("moe.py", head + "cfg.model.moe_layer_freq = [0]*1+[1]*2\n"));
  EXPECT_EQ(python.model["moe_layers"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(python.config["async_reduce"], false);
  const StackJob json = read_megatron_bridge(
      write_file("moe.json",
                 R"({"model": {"num_layers": 3, "hidden_size": 256, "num_attention_heads": 4,
          "seq_length": 128, "position_embedding_type": "rope", "vocab_size": 1024,
          "num_moe_experts": 4, "moe_ffn_hidden_size": 128, "moe_layer_freq": [0, 1, 1]},
          "train": {"micro_batch_size": 1}})"));
  EXPECT_EQ(json.model["moe_layers"], nlohmann::json::array({1, 2}));
}

TEST(CleanErrors, InputsThatOnceCrashed) {
  using testing::expect_input_error;
  expect_input_error(
      [] {
        read_megatron_args(kModel +
                           "--num-experts 4 --moe-ffn-hidden-size 0 "
                           "--moe-shared-expert-intermediate-size 64");
      },
      "--moe-ffn-hidden-size", "must be in [1, 2^24]");
  expect_input_error(
      [] { read_megatron_args(kModel + "--num-experts 4 --moe-layer-freq 99999999999999999999"); },
      "--moe-layer-freq", "cannot read");
  expect_input_error([] { read_megatron_args(kModel + "--num-experts 4 --moe-layer-freq ''"); },
                     "--moe-layer-freq", "cannot read");
  expect_input_error(
      [] {
        read_megatron_args(kModel + "--num-experts 4 --moe-layer-freq '" + std::string(50000, '(') +
                           "[1]" + std::string(50000, ')') + "'");
      },
      "--moe-layer-freq", "cannot read");
  expect_input_error(
      [] {
        read_megatron_args(kModel +
                           "--make-vocab-size-divisible-by 4000000000000000 "
                           "--tensor-model-parallel-size 4000");
      },
      "--make-vocab-size-divisible-by", "must be in [1, 2^24]");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(100000, '}');
  // Nesting that deep is refused as the JSON is parsed (parse_json_text), before any copy.
  expect_input_error([&] { read_megatron_bridge(write_file("deep.json", deep)); }, "",
                     "nested more than 1000 levels deep");
  const std::string deep_list =
      "{\"model\": {\"num_layers\": " + std::string(100000, '[') + std::string(100000, ']') + "}}";
  expect_input_error([&] { read_megatron_bridge(write_file("deep_list.json", deep_list)); }, "",
                     "nested more than 1000 levels deep");
  // Within it, a Bridge field holding lists of lists is refused by name.
  const std::string nested_list =
      "{\"model\": {\"num_layers\": " + std::string(10, '[') + std::string(10, ']') + "}}";
  expect_input_error([&] { read_megatron_bridge(write_file("nested_list.json", nested_list)); },
                     "model.num_layers", "expected a value or a list of values");
  expect_input_error(
      [] { read_megatron_bridge(write_file("plus.py", "cfg.model.num_layers += 2\n")); }, "line 1",
      "only assignments are read");
}

// The planner's checks name the field as the stack's config wrote it.
TEST(CleanErrors, PlannerErrorsNameTheStacksSetting) {
  JobParams megatron;
  megatron.from_megatron = kModel + "--tensor-model-parallel-size 3 --seq-length 768";
  testing::expect_input_error([&] { load_job(megatron); }, "--tensor-model-parallel-size (/tp)",
                              "");
  JobParams torchtitan;
  torchtitan.from_torchtitan =
      write_file("tp3.toml",
                 "[model]\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = 3\n"
                 "[training]\nseq_len = 3072\n");
  torchtitan.gpus = 3;
  testing::expect_input_error([&] { load_job(torchtitan); },
                              "[parallelism] tensor_parallel_degree (/tp)", "");
  JobParams bridge;
  bridge.from_megatron_bridge =
      write_file("tp3.py",
                 "cfg.model.num_layers = 2\ncfg.model.hidden_size = 1024\n"
                 "cfg.model.num_attention_heads = 16\ncfg.model.seq_length = 768\n"
                 "cfg.model.vocab_size = 32000\ncfg.train.micro_batch_size = 1\n"
                 "cfg.model.tensor_model_parallel_size = 3\n");
  bridge.gpus = 3;
  testing::expect_input_error([&] { load_job(bridge); }, "model.tensor_model_parallel_size (/tp)",
                              "");
}

TEST(TorchtitanSchema, DebugKeysOptimizerAndCompile) {
  const StackJob job = read_torchtitan_toml(write_file(
      "schema.toml",
      "[model]\nflavor = \"8B\"\n[training]\nseed = 3\n[optimizer]\nearly_step_in_backward = true\n"
      "lr = 1e-4\n[compile]\nenable = true\nbackend = \"aot_eager\"\n"));
  EXPECT_TRUE(contains(job.unknown, "[training] seed"));  // it lives in [debug]
  EXPECT_TRUE(contains(job.not_modelled, "[optimizer] early_step_in_backward"));
  EXPECT_TRUE(contains(job.ignored, "[optimizer] lr"));
  EXPECT_TRUE(contains(job.ignored, "[compile] backend"));
}

TEST(EmitValidity, MegatronNeverGathersWithoutOverlappedReduce) {
  JobParams p;
  p.model = "llama3-8b";
  p.gpus = 8;
  p.config_json = {{"async_reduce", false}};
  const Job job = load_job(p);
  const std::string text =
      emit_stack_config(StackFormat::megatron_args, job.model, job.cluster, job.config);
  EXPECT_EQ(text.find("--overlap-param-gather"), std::string::npos) << text;
  EXPECT_NE(text.find("# prefetch without async_reduce"), std::string::npos) << text;
}

TEST(EmitValidity, BridgeWritesTheModelsVocabularyAndAListOfExpertLayers) {
  JobParams p;
  p.model = "deepseek-v3-16b";
  p.gpus = 8;
  p.config_json = {{"ep", 8}};
  const Job job = load_job(p);
  const std::string text =
      emit_stack_config(StackFormat::megatron_bridge, job.model, job.cluster, job.config);
  EXPECT_NE(text.find("cfg.model.moe_layer_freq = ([0]*1+[1]*26)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cfg.model.vocab_size = 102400\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("cfg.tokenizer"), std::string::npos) << text;
}

}  // namespace
}  // namespace shardplan
