// Megatron-Bridge recipe fields: as JSON (a ConfigContainer's sections) and as the override
// lines a recipe script writes; presets, renamed fields and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("shardplan_bridge_" + name);
  std::ofstream(path) << text;
  return path.string();
}

// The Llama 3 shape with Megatron-FSDP as Bridge's GB200 perf recipe sets it
// (perf_recipes/llama/gb200/llama3.py @067f987, llama3_70b_pretrain_64gpu_gb200_bf16_config),
// on the 8B's dimensions.
const char* kRecipeJson = R"({
  "_target_": "megatron.bridge.training.config.ConfigContainer",
  "model": {"_target_": "megatron.bridge.models.llama.Llama3ModelProvider8B",
            "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
            "num_attention_heads": 32, "num_query_groups": 8, "kv_channels": 128,
            "gated_linear_unit": true, "normalization": "RMSNorm",
            "share_embeddings_and_output_weights": false, "add_bias_linear": false,
            "position_embedding_type": "rope", "attention_dropout": 0.0, "hidden_dropout": 0.0,
            "tensor_model_parallel_size": 1, "context_parallel_size": 1,
            "sequence_parallel": false, "seq_length": 8192,
            "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": false},
            "init_model_with_meta_device": true, "gradient_accumulation_fusion": false},
  "ddp": {"use_megatron_fsdp": true, "data_parallel_sharding_strategy": "optim_grads_params",
          "overlap_grad_reduce": true, "overlap_param_gather": true,
          "fsdp_double_buffer": true, "suggested_communication_unit_size": 800000000,
          "average_in_collective": false, "keep_fp8_transpose_cache": false},
  "train": {"micro_batch_size": 1, "global_batch_size": 256},
  "dataset": {"seq_length": 8192},
  "tokenizer": {"tokenizer_type": "NullTokenizer", "vocab_size": 128256},
  "checkpoint": {"ckpt_format": "fsdp_dtensor", "save": null},
  "mixed_precision": "bf16_mixed"
})";

TEST(BridgeConfig, ReadsARecipeAsJson) {
  JobParams p;
  p.from_megatron_bridge = write_file("recipe.json", kRecipeJson);
  p.cluster = "gb200-nvl72";
  p.gpus = 64;
  const Job job = load_job(p);
  EXPECT_EQ(job.model.name, "llama3-8b");
  const FsdpConfig& c = job.config;
  EXPECT_EQ(c.sharding_strategy, ShardingStrategy::optim_grads_params);
  EXPECT_TRUE(c.double_buffer);
  EXPECT_EQ(c.grad_accum, 4);  // 256 / (1 × 64)
  EXPECT_EQ(c.param_dtype, DType::bf16);
  EXPECT_EQ(c.main_param_dtype, DType::fp32);
  const StackJob& s = *job.stack;
  EXPECT_TRUE(s.unknown.empty());
  bool unit_size_noted = false;
  for (const std::string& note : s.not_modelled) {
    unit_size_noted |= note.find("ddp.suggested_communication_unit_size") != std::string::npos;
  }
  EXPECT_TRUE(unit_size_noted);
}

TEST(BridgeConfig, ReadsOverrideLinesAndPresets) {
  const StackJob job = read_megatron_bridge(write_file(
      "overrides.py",
      "cfg = llama3_8b_pretrain_config()\n"
      "cfg.mixed_precision = \"bf16_with_mxfp8_mixed\"\n"
      "cfg.model.num_layers = 2\ncfg.model.hidden_size = 1024\n"
      "cfg.model.num_attention_heads = 16  # sixteen\ncfg.model.seq_length = 512\n"
      "cfg.model.position_embedding_type = 'rope'\ncfg.train.micro_batch_size = 4\n"
      "cfg.tokenizer.vocab_size = 32000\n"
      "dist_config.use_megatron_fsdp = True\nddp_config.use_megatron_fsdp = True\n"  // Bridge's
                                                                                     // docs
      "ddp_config.data_parallel_sharding_strategy = \"optim_grads\"\n"
      "model.recompute_granularity=selective\n"  // Hydra's form
      "cfg.model.recompute_modules = ['core_attn']\n"
      "cfg.model.virtual_pipeline_model_parallel_size = None\n"));
  EXPECT_EQ(job.model["num_layers"], 2);
  EXPECT_EQ(job.config["fp8"], true);
  EXPECT_EQ(job.config["fp8_recipe"], "mxfp8");
  EXPECT_EQ(job.config["fp8_param_gather"], true);
  EXPECT_EQ(job.config["recompute"], "selective");
  EXPECT_EQ(job.config["micro_batch"], 4);
  EXPECT_EQ(job.config["sharding_strategy"], "optim_grads");
  EXPECT_TRUE(job.unknown.empty());
}

// A recipe's CUDA graph fields (Bridge's perf recipes write cuda_graph_scope, the name
// Megatron-Core still accepts).
TEST(BridgeConfig, ReadsCudaGraphScopes) {
  const StackJob job = read_megatron_bridge(
      write_file("graphs.py",
                 "cfg.model.num_layers = 2\ncfg.model.hidden_size = 1024\n"
                 "cfg.model.num_attention_heads = 16\ncfg.model.seq_length = 512\n"
                 "cfg.train.micro_batch_size = 1\ncfg.tokenizer.vocab_size = 32000\n"
                 "cfg.model.cuda_graph_impl = \"transformer_engine\"\n"
                 "cfg.model.cuda_graph_scope = [\"attn\", \"mlp\"]\n"));
  EXPECT_EQ(job.config["cuda_graphs"], nlohmann::json({"attn", "mlp"}));
  EXPECT_TRUE(job.unknown.empty());
}

TEST(BridgeConfig, ErrorsNameTheField) {
  using testing::expect_input_error;
  expect_input_error(
      [] {
        read_megatron_bridge(write_file(
            "disagree.py", "cfg.model.seq_length = 4096\ncfg.dataset.seq_length = 8192\n"));
      },
      "dataset.seq_length", "disagrees with model.seq_length");
  expect_input_error(
      [] {
        read_megatron_bridge(write_file("preset.py", "cfg.mixed_precision = \"fp4_magic\"\n"));
      },
      "mixed_precision", "preset 'fp4_magic' is not modelled");
  expect_input_error([] { read_megatron_bridge(write_file("line.py", "cfg.model.num_layers\n")); },
                     "line 1", "expected 'cfg.section.field = value'");
  expect_input_error(
      [] {
        read_megatron_bridge(write_file("type.py",
                                        "cfg.model.num_layers = 'many'\ncfg.model.hidden_size = 8\n"
                                        "cfg.model.num_attention_heads = 1\n"));
      },
      "model.num_layers", "expected a number, got 'many'");
  expect_input_error([] { read_megatron_bridge(write_file("bad.json", "{\"model\": ")); }, "",
                     "invalid JSON");
}

}  // namespace
}  // namespace shardplan
