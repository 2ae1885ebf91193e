// Careless and hostile input to the stack readers (issue 33): no crash, no silent default,
// one clear error or note, and nothing raw echoed back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/job.h"
#include "interop/internal/stack_text.h"
#include "interop/stack_job.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

using testing::expect_input_error;

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("shardplan_bad_input_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

bool contains(const std::vector<std::string>& list, const std::string& text) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

const std::string kModel =
    "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
    "--max-position-embeddings 1024 --vocab-size 32000 ";

const std::string kBridgeModel =
    "cfg.model.num_layers = 2\ncfg.model.hidden_size = 1024\ncfg.model.num_attention_heads = 16\n"
    "cfg.model.seq_length = 512\ncfg.model.vocab_size = 32000\n";

// Micro-batch 0 with a global batch divided by it (SIGFPE before).
TEST(BadStackInput, ZeroOrNegativeBatchesAreErrorsNotADivision) {
  JobParams megatron;
  megatron.from_megatron = kModel + "--micro-batch-size 0 --global-batch-size 64";
  expect_input_error([&] { load_job(megatron); }, "--micro-batch-size", "must be positive, got 0");
  megatron.from_megatron = kModel + "--micro-batch-size 1 --global-batch-size -64";
  expect_input_error([&] { load_job(megatron); }, "--global-batch-size", "must be positive");
  JobParams bridge;
  bridge.from_megatron_bridge = write_file(
      "micro0.py",
      kBridgeModel + "cfg.train.micro_batch_size = 0\ncfg.train.global_batch_size = 8\n");
  expect_input_error([&] { load_job(bridge); }, "train.micro_batch_size",
                     "must be positive, got 0");
  // The division guards itself whatever calls it.
  StackJob job;
  job.label = "x";
  expect_input_error([&] { grad_accum_from_global_batch(job, 64, 0, 8); }, "micro-batch",
                     "must be positive, got 0");
  expect_input_error([&] { grad_accum_from_global_batch(job, 64, INT64_MAX, 8); }, "global batch",
                     "not a multiple");
}

TEST(BadStackInput, ParallelSizesAreBoundedBeforeTheyAreMultiplied) {
  expect_input_error(
      [] { read_megatron_args(kModel + "--micro-batch-size 1 --tensor-model-parallel-size 0"); },
      "--tensor-model-parallel-size", "must be positive, got 0");
  expect_input_error(
      [] {
        read_megatron_args(kModel +
                           "--micro-batch-size 1 --context-parallel-size 9000000000000000");
      },
      "--context-parallel-size", "must be in [1, 1048576]");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_file("huge.toml",
                                        "[parallelism]\ndata_parallel_shard_degree = "
                                        "4611686018427387904\ntensor_parallel_degree = 4\n"));
      },
      "[parallelism] data_parallel_shard_degree", "must be -1 (the GPUs left) or in [1, 1048576]");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_file(
            "product.toml",
            "[parallelism]\ndata_parallel_shard_degree = 1048576\ndata_parallel_replicate_degree "
            "= 1048576\ntensor_parallel_degree = 1048576\ncontext_parallel_degree = 1048576\n"));
      },
      "[parallelism] data_parallel_shard_degree", "ask for more than the 1048576 GPUs");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_file("global0.toml", "[training]\nglobal_batch_size = 0\n"));
      },
      "[training] global_batch_size", "must be positive or -1, got 0");
}

TEST(BadStackInput, EmptyInputIsNothingToRead) {
  expect_input_error([] { read_megatron_args(""); }, "", "nothing to read", "--from-megatron");
  expect_input_error([] { read_megatron_args("  \n"); }, "", "nothing to read", "--from-megatron");
  const std::string empty = write_file("empty.sh", "");
  expect_input_error([&] { read_megatron_args(empty); }, "", "the file is empty", empty);
  const std::string comments = write_file("comments.sh", "#!/bin/bash\n# nothing\nX=1\n");
  expect_input_error([&] { read_megatron_args(comments); }, "",
                     "holds no Megatron-LM arguments: no command (nothing but assignments");
  expect_input_error([] { read_megatron_args("python train.py --"); }, "",
                     "holds no Megatron-LM arguments");
  expect_input_error([&] { read_megatron_bridge(write_file("empty.py", "\n\n")); }, "",
                     "the file is empty");
  expect_input_error([&] { read_megatron_bridge(write_file("comment.py", "# only\n")); }, "",
                     "holds no fields");
  expect_input_error([&] { read_torchtitan_toml(write_file("empty.toml", "# only\n")); }, "",
                     "holds no settings");
}

TEST(BadStackInput, DevicesDirectoriesAndBinaryFilesAreRefused) {
  // /dev/zero (read up to the input limit, then refused) is checked end to end in
  // tests/cli/stack_config_test.cc.
  const std::string directory = std::filesystem::temp_directory_path().string();
  expect_input_error([&] { read_megatron_bridge(directory); }, "", "is a directory");
  const std::string binary = write_file("binary.toml", std::string("[model]\0\x01\x02", 10));
  expect_input_error([&] { read_torchtitan_toml(binary); }, "", "holds a NUL byte (at byte 7)");
  expect_input_error([&] { read_megatron_args(binary); }, "", "a binary file");
}

TEST(BadStackInput, TorchtitanRefusesWhatTorchtitanRefuses) {
  expect_input_error(
      [] { read_torchtitan_toml(write_file("int8.toml", "[training]\ndtype = \"int8\"\n")); },
      "[training] dtype", "'int8' is not one of torchtitan's values: bfloat16, float32");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_file(
            "rotate.toml", "[parallelism]\ncontext_parallel_rotate_method = \"ring\"\n"));
      },
      "[parallelism] context_parallel_rotate_method", "allgather, alltoall");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_file(
            "recipe.toml",
            "[model]\nconverters = [\"quantize.linear.float8\"]\n[quantize.linear.float8]\n"
            "recipe_name = \"colwise\"\n"));
      },
      "[quantize.linear.float8] recipe_name", "tensorwise, rowwise, rowwise_with_gw_hp");
  // TOML itself forbids a key given twice; so does torchtitan's tomllib.
  expect_input_error(
      [] {
        read_torchtitan_toml(
            write_file("twice.toml", "[training]\nseq_len = 2048\nseq_len = 4096\n"));
      },
      "line 3, column 11", "cannot redefine existing integer 'seq_len'");
}

TEST(BadStackInput, BridgeSectionsMustBeObjectsAndTyposAreNamed) {
  expect_input_error(
      [] { read_megatron_bridge(write_file("list.json", R"({"model": [1, 2], "train": {}})")); },
      "model", "is a section of fields, so it must be an object");
  expect_input_error([] { read_megatron_bridge(write_file("top.json", "[1, 2]")); }, "",
                     "a JSON list; expected an object of sections");
  const StackJob job = read_megatron_bridge(write_file(
      "typo.py", kBridgeModel +
                     "cfg.train.micro_batch_size = 1\ncfg.model.num_layrs = 4\n"
                     "cfg.ddp.overlap_grad_reduc = True\ncfg.model.apply_rope_fusion = True\n"));
  EXPECT_TRUE(contains(job.unknown, "model.num_layrs (did you mean model.num_layers?)"));
  EXPECT_TRUE(
      contains(job.unknown, "ddp.overlap_grad_reduc (did you mean ddp.overlap_grad_reduce?)"));
  // A real field the plan does not model is still that, not a typo.
  EXPECT_TRUE(contains(job.not_modelled, "model.apply_rope_fusion: read, not modelled"));
  // Two spellings of one setting must agree.
  expect_input_error(
      [] {
        read_megatron_bridge(write_file("disagree.py", kBridgeModel +
                                                           "cfg.train.micro_batch_size = 1\n"
                                                           "cfg.dataset.seq_length = 1024\n"));
      },
      "dataset.seq_length", "disagrees with model.seq_length");
}

// argparse keeps the last of a repeated flag; the reader does too, and says so.
TEST(BadStackInput, RepeatedMegatronFlagsKeepTheLastAndAreNoted) {
  const StackJob job =
      read_megatron_args(kModel + "--micro-batch-size 1 --micro-batch-size 4 --bf16 --bf16");
  EXPECT_EQ(job.config["micro_batch"], 4);
  EXPECT_TRUE(contains(job.not_modelled,
                       "--micro-batch-size given 2 times with different values: the last (4) is "
                       "used, as Megatron's argparse does"));
  EXPECT_FALSE(contains(job.not_modelled, "--bf16 given"));  // the same value twice: no note
}

// Editors on Windows write a byte-order mark and CRLF line ends: read as if they were not.
TEST(BadStackInput, ByteOrderMarkAndCrlfAreRead) {
  const std::string bom = "\xEF\xBB\xBF";
  const StackJob megatron = read_megatron_args(
      write_file("crlf.sh", bom + "ARGS=\"" + kModel +
                                "\"\r\ntorchrun --nproc-per-node 4 x.py $ARGS \\\r\n"
                                "  --micro-batch-size 2\r\n"));
  EXPECT_EQ(megatron.gpus, 4);
  EXPECT_EQ(megatron.config["micro_batch"], 2);
  EXPECT_TRUE(megatron.unknown.empty());
  const StackJob bridge = read_megatron_bridge(write_file(
      "crlf.json", bom + "{\"model\": {\"num_layers\": 2, \"hidden_size\": 1024,\r\n"
                         "\"num_attention_heads\": 16, \"seq_length\": 512, \"vocab_size\": 32000},"
                         "\r\n\"train\": {\"micro_batch_size\": 1}}\r\n"));
  EXPECT_EQ(bridge.model["num_layers"], 2);
  const StackJob torchtitan = read_torchtitan_toml(write_file(
      "crlf.toml", bom + "[model]\r\nflavor = \"8B\"\r\n[training]\r\nseq_len = 4096\r\n"));
  EXPECT_EQ(torchtitan.zoo_model, "llama3-8b");
  EXPECT_EQ(torchtitan.config["seq_len"], 4096);
}

// Notes and errors quote what they echo: escaped, and cut when long.
TEST(BadStackInput, NothingRawIsEchoed) {
  const std::string huge(3 << 20, 'x');
  const StackJob job = read_megatron_args(kModel + "--micro-batch-size 1 --lr '\x01\x1b[31m' --" +
                                          huge + " --data-path " + huge + " \xff\xfe");
  for (const auto* list : {&job.ignored, &job.not_modelled, &job.unknown}) {
    for (const std::string& note : *list) {
      EXPECT_LT(note.size(), 1000u);
      EXPECT_EQ(note.find('\x1b'), std::string::npos) << note;
      EXPECT_EQ(note.find('\xff'), std::string::npos) << note;
    }
  }
  EXPECT_NO_THROW(stack_job_notes_json(job).dump());  // valid UTF-8 for --json
  try {
    read_megatron_args(kModel + "--micro-batch-size '\x01" + huge + "'");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_LT(std::string(e.what()).size(), 1000u);
    EXPECT_NE(std::string(e.what()).find("\\x01"), std::string::npos) << e.what();
  }
}

// 100,000 unknown flags: suggestions for the first few, a count for the rest.
TEST(BadStackInput, ManyUnknownFlagsAreCounted) {
  std::string text = kModel + "--micro-batch-size 1";
  for (int i = 0; i < 100000; ++i) text += " --unknown-flag-" + std::to_string(i);
  const StackJob job = read_megatron_args(text);
  EXPECT_EQ(job.unknown.size(), UnknownNames::kListed + 1);
  EXPECT_EQ(job.unknown.back(), "... and 99900 more");
}

}  // namespace
}  // namespace shardplan
