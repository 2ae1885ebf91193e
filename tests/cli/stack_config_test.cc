// End-to-end: the training stacks' configs in (--from-megatron, --from-megatron-bridge,
// --from-torchtitan) and out (--emit) through the real binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

const std::string kData = std::string(SHARDPLAN_SOURCE_DIR) + "/tests/interop/data/";
const std::string kMegatron = kData + "megatron/train_llama3_8b_fsdp_h100_fp8.cmdline";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("shardplan_stack_cli_" + name)).string();
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(StackConfigCommand, PlanFromMegatronListsWhatItDidNotUse) {
  const CommandResult r = run_shardplan({"plan", "--from-megatron", kMegatron, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // with --json the notes are in the object, not on stderr
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["model"], "llama3-8b");
  EXPECT_EQ(j["num_gpus"], 8);
  EXPECT_EQ(j["config"]["grad_accum"], 16);
  const nlohmann::json& notes = j["stack_input"];
  EXPECT_EQ(notes["format"], "megatron-args");
  EXPECT_EQ(notes["input"], kMegatron);
  EXPECT_TRUE(notes["unknown"].empty());
  EXPECT_THAT(notes["not_modelled"].dump(), HasSubstr("--cross-entropy-loss-fusion"));
  // Without --json a person sees them on stderr.
  const CommandResult text = run_shardplan({"plan", "--from-megatron", kMegatron});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.err,
              HasSubstr("shardplan: note: " + kMegatron + ": --cross-entropy-loss-fusion"));
}

TEST(StackConfigCommand, InlineArgumentsWithUnknownFlagsWarn) {
  const CommandResult r = run_shardplan(
      {"describe", "--from-megatron",
       "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
       "--max-position-embeddings 1024 --micro-batch-size 1 --vocab-size 32000 --bf16 "
       "--use-megatron-fsdp --overlap-grad-reduce --overlap-param-gather --globall-batch-size 8",
       "--gpus", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: --from-megatron: not megatron-args arguments, left out: "
                               "--globall-batch-size (did you mean --global-batch-size?)"));
  EXPECT_THAT(r.out, HasSubstr("megatron-model (transformer)"));
}

// sweep --emit writes the winner; reading the text back plans that same configuration.
TEST(StackConfigCommand, SweepEmitsTheWinnerAndItReadsBack) {
  const std::vector<std::string> sweep = {"sweep",
                                          "--from-torchtitan",
                                          kData + "torchtitan/llama3_8b.toml",
                                          "--gpus",
                                          "8",
                                          "--prefetch",
                                          "1",
                                          "--recompute",
                                          "sac_op,full",
                                          "--micro-batch",
                                          "1,2",
                                          "-j",
                                          "1"};
  std::vector<std::string> json_args = sweep;
  json_args.push_back("--json");
  json_args.insert(json_args.end(), {"--emit", "torchtitan"});
  const CommandResult r = run_shardplan(json_args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  const std::string text = j["emit"]["text"];
  std::vector<std::string> emit_args = sweep;
  emit_args.insert(emit_args.end(), {"--emit", "torchtitan"});
  const CommandResult plain = run_shardplan(emit_args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, text);  // stdout is the TOML alone, ready to redirect
  const std::string toml = write_file("winner.toml", text);
  const CommandResult back =
      run_shardplan({"plan", "--from-torchtitan", toml, "--gpus", "8", "--json"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  const nlohmann::json winner = j["ranking"][0]["config"];
  const nlohmann::json planned = stdout_json(back)["config"];
  for (const char* key : {"micro_batch", "recompute", "dp_shard", "tp", "stack", "grad_accum"}) {
    EXPECT_EQ(planned[key], winner[key]) << key << "\n" << text;
  }
}

TEST(StackConfigCommand, PlanEmitsEachFormat) {
  for (const char* format : {"megatron-args", "megatron-bridge", "torchtitan"}) {
    const CommandResult r = run_shardplan({"plan", "--gpus", "16", "--emit", format});
    ASSERT_EQ(r.exit_code, 0) << format << r.err;
    EXPECT_THAT(r.out, HasSubstr("# shardplan: llama3-8b on 16 GPUs of dgx-h100")) << format;
  }
}

TEST(StackConfigCommand, BadCombinationsAreErrors) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{"plan", "--from-megatron", kMegatron, "--model", "llama3-70b"},
       "shardplan: error: --model: cannot be combined with --from-megatron"},
      {{"plan", "--from-megatron", kMegatron, "--from-torchtitan",
        kData + "torchtitan/llama3_8b.toml"},
       "shardplan: error: --from-torchtitan: cannot be combined with --from-megatron"},
      {{"plan", "--emit", "deepspeed"}, "shardplan: error: --emit: unknown format 'deepspeed'"},
      {{"plan", "--from-megatron", "/no/such/file"},
       "shardplan: error: /no/such/file: cannot open file"},
      {{"simulate", "--plan", kMegatron, "--from-megatron", kMegatron},
       "--from-megatron: cannot be combined with --plan"},
  };
  for (const Bad& bad : cases) {
    const CommandResult r = run_shardplan(bad.args);
    EXPECT_EQ(r.exit_code, 1) << bad.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(bad.message));
    EXPECT_EQ(r.out, "");
  }
}

// Issue 33: inputs that became the default job, or a crash.
TEST(StackConfigCommand, EmptyOrBrokenStackInputIsAnError) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string zero_micro =
      "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
      "--max-position-embeddings 512 --vocab-size 32000 --micro-batch-size 0 "
      "--global-batch-size 64";
  const std::vector<Bad> cases = {
      {{"plan", "--from-megatron", ""}, "--from-megatron: nothing to read"},
      {{"plan", "--from-megatron", " "}, "--from-megatron: nothing to read"},
      {{"plan", "--from-megatron", zero_micro},
       "shardplan: error: --from-megatron: --micro-batch-size: must be positive, got 0"},
      {{"plan", "--from-torchtitan", write_file("int8.toml", "[training]\ndtype = \"int8\"\n")},
       "[training] dtype: 'int8' is not one of torchtitan's values: bfloat16, float32"},
      {{"plan", "--from-torchtitan", "/dev/zero"}, "/dev/zero: the input is larger than"},
      {{"plan", "--from-megatron-bridge", write_file("list.json", R"({"model": []})")},
       "model: is a section of fields, so it must be an object"},
  };
  for (const Bad& bad : cases) {
    const CommandResult r = run_shardplan(bad.args);
    EXPECT_NE(r.exit_code, 0) << bad.message;
    EXPECT_THAT(r.err, HasSubstr(bad.message));
    EXPECT_EQ(r.out, "");
  }
}

// A published launch script with its flags in quoted string variables plans end to end.
TEST(StackConfigCommand, PlansAQuotedStringLaunchScript) {
  const CommandResult r =
      run_shardplan({"plan", "--from-megatron",
                     kData + "launch_scripts/megatron_lm_pretrain_gpt_distributed.sh", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["num_gpus"], 8);
  EXPECT_EQ(j["config"]["micro_batch"], 8);
  EXPECT_TRUE(j["stack_input"]["unknown"].empty());
}

}  // namespace
}  // namespace shardplan::testing
