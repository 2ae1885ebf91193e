// Published launch scripts (tests/interop/data/launch_scripts/SOURCE.md) read by
// --from-megatron as bash would run them: Megatron-LM's older quoted-string style, its
// array style with if blocks, and Megatron-DeepSpeed's scripts.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

const std::string kScripts =
    std::string(SHARDPLAN_SOURCE_DIR) + "/tests/interop/data/launch_scripts/";

bool contains(const std::vector<std::string>& list, const std::string& text) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

// GPT_ARGS="--num-layers 24 ..." expanded unquoted on the torchrun line: before, these
// scripts read as empty ("--num-layers: is required").
TEST(PublishedLaunchScripts, MegatronQuotedStringVariables) {
  JobParams p;
  p.from_megatron = kScripts + "megatron_lm_pretrain_gpt_distributed.sh";
  const Job job = load_job(p);
  const StackJob& s = *job.stack;
  EXPECT_EQ(s.model["num_layers"], 24);
  EXPECT_EQ(s.model["hidden_size"], 1024);
  EXPECT_EQ(s.model["num_heads"], 16);
  EXPECT_EQ(s.gpus, 8);  // DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES"
  EXPECT_EQ(job.cluster.num_gpus, 8);
  EXPECT_EQ(job.config.micro_batch, 8);
  EXPECT_EQ(job.config.seq_len, 1024);
  EXPECT_EQ(job.config.grad_accum, 1);  // --global-batch-size 64 / (8 × 8)
  EXPECT_EQ(job.config.param_dtype, DType::fp16);
  EXPECT_TRUE(s.unknown.empty()) << s.unknown.front();
  EXPECT_TRUE(contains(s.ignored, "--lr"));
  // $CHECKPOINT_PATH is a placeholder bash reads as a redirection: never set, left as written.
  EXPECT_TRUE(contains(s.ignored, "--save"));
}

TEST(PublishedLaunchScripts, MegatronArraysWithPositionalPaths) {
  // $1..$5 are not given: --save $1 keeps its text (an ignored flag), and the flags read
  // up to Megatron's pipeline parallelism of 16, which shardplan does not model.
  testing::expect_input_error(
      [] { read_megatron_args(kScripts + "megatron_lm_train_gpt3_175b_distributed.sh"); },
      "--pipeline-model-parallel-size", "pipeline parallelism is not modelled");
}

// The script and the command line bash runs from it (the .cmdline fixture) are one job.
TEST(PublishedLaunchScripts, MegatronFsdpScriptIsTheCommandItRuns) {
  const StackJob script =
      read_megatron_args(kScripts + "megatron_lm_train_llama3_8b_fsdp_h100_fp8.sh");
  const StackJob cmdline =
      read_megatron_args(std::string(SHARDPLAN_SOURCE_DIR) +
                         "/tests/interop/data/megatron/train_llama3_8b_fsdp_h100_fp8.cmdline");
  nlohmann::json script_model = script.model;
  nlohmann::json cmdline_model = cmdline.model;
  script_model.erase("name");  // each file's stem
  script_model.erase("source");
  cmdline_model.erase("name");
  cmdline_model.erase("source");
  EXPECT_EQ(script_model, cmdline_model);
  EXPECT_EQ(script.config, cmdline.config);
  EXPECT_EQ(script.gpus, 8);
  EXPECT_EQ(script.global_batch, 128);
  EXPECT_TRUE(script.unknown.empty());
  // What it could not read is said: the file test and the $(dirname ...) substitutions.
  EXPECT_TRUE(contains(script.not_modelled,
                       "shell: not read: line 239: if [ ! -f \"$PRETRAIN_SCRIPT_PATH\" ]"))
      << ::testing::PrintToString(script.not_modelled);
  EXPECT_TRUE(contains(script.not_modelled, "$(dirname \"$CHECKPOINT_PATH\")"));
}

TEST(PublishedLaunchScripts, DeepSpeedHereDocumentAndGrownArguments) {
  JobParams p;
  p.from_megatron = kScripts + "megatron_deepspeed_run_deepspeed_example.sh";
  p.gpus = 8;  // `deepspeed pretrain_gpt.py` takes every GPU of the node
  const Job job = load_job(p);
  const StackJob& s = *job.stack;
  EXPECT_EQ(s.model["num_layers"], 24);
  EXPECT_EQ(s.model["hidden_size"], 512);
  EXPECT_EQ(job.config.seq_len, 256);
  EXPECT_EQ(job.config.micro_batch, 4);
  EXPECT_EQ(job.config.grad_accum, 32);  // 1024 / (4 × 8)
  EXPECT_EQ(job.config.param_dtype, DType::fp16);
  // --checkpoint-activations: Megatron's old spelling of full recompute (no method given).
  // DeepSpeed's own flags are not Megatron-LM's: listed, not guessed.
  EXPECT_TRUE(contains(s.unknown, "--deepspeed_config"));
  EXPECT_TRUE(contains(s.unknown, "--zero-stage"));
  EXPECT_TRUE(contains(s.unknown, "--no-pipeline-parallel"));
  // The here-document's JSON is the DeepSpeed config, not arguments.
  EXPECT_FALSE(contains(s.ignored, "train_batch_size"));
}

TEST(PublishedLaunchScripts, DeepSpeedIfBlocksArithmeticAndEval) {
  JobParams p;
  p.from_megatron = kScripts + "megatron_deepspeed_ds_pretrain_gpt_1.3B_dense.sh";
  p.gpus = 64;  // NUM_GPUS=64 in the script; its deepspeed line does not say
  const Job job = load_job(p);
  const StackJob& s = *job.stack;
  EXPECT_EQ(s.model["num_layers"], 24);
  EXPECT_EQ(s.model["hidden_size"], 2048);
  EXPECT_EQ(s.model["family"], "transformer");  // --num-experts 1: dense
  EXPECT_TRUE(contains(s.not_modelled, "--num-experts 1: one expert per layer is a dense MLP"));
  EXPECT_EQ(job.config.tp, 4);  // MP_SIZE=4
  EXPECT_EQ(job.config.seq_len, 2048);
  EXPECT_EQ(job.config.micro_batch, 2);
  EXPECT_EQ(job.config.grad_accum, 16);  // 512 / (2 × 64 / 4)
  // `if [ "${ACTIVATION_CHECKPOINT}" = "true" ]` appended --checkpoint-activations;
  // `if [[ $EP_SIZE -gt 1 ]]` did not append --create-moe-param-group.
  EXPECT_TRUE(contains(s.unknown, "--deepspeed-activation-checkpointing"));
  EXPECT_FALSE(contains(s.unknown, "--create-moe-param-group"));
  EXPECT_FALSE(contains(s.unknown, "--no-pipeline-parallel"));
  // $(( ${TRAIN_TOKENS} * 3 / ${SEQ_LEN} )) = 300e9 × 3 / 2048.
  EXPECT_TRUE(contains(s.ignored, "--train-samples"));
  EXPECT_TRUE(contains(s.not_modelled, "`pwd`"));
}

}  // namespace
}  // namespace shardplan
