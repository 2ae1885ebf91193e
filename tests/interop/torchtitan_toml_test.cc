// torchtitan's own Llama 3 job configs (tests/interop/data/torchtitan, v0.2.2), its
// defaults and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "models/json_reader.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

std::string config(const std::string& name) {
  return std::string(SHARDPLAN_SOURCE_DIR) + "/tests/interop/data/torchtitan/" + name;
}

std::string write_toml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("shardplan_tt_" + name + ".toml");
  std::ofstream(path) << text;
  return path.string();
}

Job load(const std::string& file, int64_t gpus) {
  JobParams p;
  p.from_torchtitan = file;
  p.cluster = "dgx-h100";
  p.gpus = gpus;
  return load_job(p);
}

// "a preset for 64 A100 GPUs": FSDP over all 64, selective per-op checkpointing, eager.
TEST(TorchtitanToml, Llama3_8B) {
  const Job job = load(config("llama3_8b.toml"), 64);
  EXPECT_EQ(job.model.name, "llama3-8b");
  const FsdpConfig& c = job.config;
  EXPECT_EQ(c.sharding_strategy, ShardingStrategy::optim_grads_params);
  EXPECT_EQ(c.dp_shard, 64);  // data_parallel_shard_degree = -1: the rest
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.micro_batch, 1);
  EXPECT_EQ(c.grad_accum, 1);
  EXPECT_EQ(c.seq_len, 8192);
  EXPECT_EQ(c.recompute, Recompute::sac_op);
  EXPECT_EQ(c.stack, Stack::torch_eager);  // [compile] enable = false
  EXPECT_FALSE(fp8_compute(c));            // the float8 converter is commented out
  EXPECT_EQ(c.allocator, Allocator::expandable);
  EXPECT_TRUE(job.stack->unknown.empty());
  EXPECT_FALSE(job.stack->gpus.has_value());  // -1 leaves the world size to the launcher
}

// torchtitan's published Llama 3 8B run on 64 A100 (docs/performance.md, 2,973 tokens/s per
// GPU; docs/fidelity row torchtitan-a100-llama3-8b) ran this config: read from the TOML, the
// job equals the row's, given what a TOML cannot say (the PyTorch version's RMSNorm and
// SDPA kernels).
TEST(TorchtitanToml, Llama3_8BIsTheJobOfTheFidelityRow) {
  const nlohmann::json runs =
      read_json_file(std::string(SHARDPLAN_SOURCE_DIR) + "/docs/fidelity/runs.json");
  nlohmann::json row;
  for (const auto& run : runs["runs"]) {
    if (run["id"] == "torchtitan-a100-llama3-8b") row = run;
  }
  ASSERT_FALSE(row.is_null());
  JobParams from_row;
  from_row.model = row["model"];
  from_row.cluster = row["cluster"];
  from_row.gpus = row["gpus"].get<int64_t>();
  from_row.config_json = row["config"];
  JobParams from_toml;
  from_toml.from_torchtitan = config("llama3_8b.toml");
  from_toml.cluster = row["cluster"];
  from_toml.gpus = row["gpus"].get<int64_t>();
  from_toml.overrides = {"fused_rms_norm=false", "sdpa_backend=flash"};
  const Job a = load_job(from_row);
  const Job b = load_job(from_toml);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(fsdp_config_to_json(a.config), fsdp_config_to_json(b.config));
}

TEST(TorchtitanToml, Llama3_70B) {
  const Job job = load(config("llama3_70b.toml"), 64);
  EXPECT_EQ(job.model.name, "llama3-70b");
  EXPECT_EQ(job.config.tp, 8);
  EXPECT_EQ(job.config.dp_shard, 8);
  EXPECT_TRUE(sequence_parallel(job.config));  // torchtitan's TP plan shards the norms
  EXPECT_EQ(job.config.micro_batch, 8);
  EXPECT_EQ(job.config.recompute, Recompute::full);
}

// The 405B: "a preset for 128 H100 GPUs", TP 8, async TP, compile, Float8 with FP8
// all-gathers; its converter is named "float8", which the reader takes as
// "quantize.linear.float8".
TEST(TorchtitanToml, Llama3_405B) {
  const Job job = load(config("llama3_405b.toml"), 128);
  EXPECT_EQ(job.model.name, "llama3.1-405b");
  const FsdpConfig& c = job.config;
  EXPECT_EQ(c.tp, 8);
  EXPECT_EQ(c.dp_shard, 16);
  EXPECT_TRUE(c.tp_comm_overlap);
  EXPECT_EQ(c.stack, Stack::torch_compile);
  EXPECT_TRUE(fp8_compute(c));
  EXPECT_TRUE(c.fp8_param_gather);
  EXPECT_EQ(c.micro_batch, 2);
  EXPECT_EQ(c.recompute, Recompute::full);
}

// No [model] flavor: torchtitan's debugmodel, which the zoo does not hold.
TEST(TorchtitanToml, DebugModelIsTheDefaultFlavour) {
  JobParams p;
  p.from_torchtitan = write_toml("debug", "[parallelism]\ndata_parallel_shard_degree = 4\n");
  const Job job = load_job(p);
  EXPECT_EQ(job.model.name, "llama3-debugmodel");
  EXPECT_EQ(job.model.hidden_size, 256);
  EXPECT_EQ(job.model.num_layers, 6);
  EXPECT_EQ(job.cluster.num_gpus, 4);
  // Written back, it names the flavour and reads as the same job.
  const std::string text =
      emit_stack_config(StackFormat::torchtitan, job.model, job.cluster, job.config);
  EXPECT_NE(text.find("flavor = \"debugmodel\""), std::string::npos) << text;
  JobParams back;
  back.from_torchtitan = write_toml("debug_back", text);
  EXPECT_EQ(fsdp_config_to_json(load_job(back).config), fsdp_config_to_json(job.config));
}

TEST(TorchtitanToml, DefaultsAndExplicitDegrees) {
  // An empty config: llama3 debugmodel is not built in, so name a flavour; the rest is
  // torchtitan's defaults: batch 8, 2048 tokens, selective checkpointing every 2nd layer.
  const StackJob job = read_torchtitan_toml(
      write_toml("defaults",
                 "[model]\nflavor = \"8B\"\n[parallelism]\ndata_parallel_shard_degree = 4\n"
                 "data_parallel_replicate_degree = 2\n[training]\nglobal_batch_size = 128\n"));
  EXPECT_EQ(job.config["micro_batch"], 8);
  EXPECT_EQ(job.config["seq_len"], 2048);
  EXPECT_EQ(job.config["recompute"], "sac_layer");
  EXPECT_EQ(job.config["recompute_every"], 2);
  EXPECT_EQ(job.config["dp_outer"], 2);  // HSDP
  EXPECT_EQ(job.gpus, 8);
  EXPECT_EQ(job.global_batch, 128);
  JobParams p;
  p.from_torchtitan =
      write_toml("gbs",
                 "[model]\nflavor = \"8B\"\n[parallelism]\ndata_parallel_shard_degree = 8\n"
                 "[training]\nlocal_batch_size = 2\nglobal_batch_size = 64\n");
  EXPECT_EQ(load_job(p).config.grad_accum, 4);  // 64 / (2 × 8)
}

TEST(TorchtitanToml, ListsUnknownKeysAsTorchtitanWouldRejectThem) {
  const StackJob job = read_torchtitan_toml(
      write_toml("unknown",
                 "[model]\nflavor = \"8B\"\n[parallelism]\ntensor_paralel_degree = 2\n"
                 "[mystery]\nx = 1\n[metrics]\nlog_freq = 5\n"));
  ASSERT_EQ(job.unknown.size(), 2u);
  EXPECT_EQ(job.unknown[0], "[mystery]");
  EXPECT_EQ(job.unknown[1],
            "[parallelism] tensor_paralel_degree (did you mean tensor_parallel_degree?)");
  EXPECT_EQ(job.ignored.front(), "[metrics]");
}

TEST(TorchtitanToml, ErrorsNameTheKey) {
  using testing::expect_input_error;
  expect_input_error(
      [] { read_torchtitan_toml(write_toml("flavor", "[model]\nflavor = \"9B\"\n")); },
      "[model] flavor", "known: llama3 debugmodel, llama3 8B");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_toml("type",
                                        "[model]\nflavor = \"8B\"\n[parallelism]\n"
                                        "tensor_parallel_degree = \"8\"\n"));
      },
      "[parallelism] tensor_parallel_degree", "expected an integer");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_toml("pp",
                                        "[model]\nflavor = \"8B\"\n[parallelism]\n"
                                        "pipeline_parallel_degree = 4\n"));
      },
      "[parallelism] pipeline_parallel_degree", "not modelled");
  expect_input_error(
      [] {
        read_torchtitan_toml(write_toml("ac",
                                        "[model]\nflavor = \"8B\"\n"
                                        "[activation_checkpoint]\nmode = \"selective\"\n"
                                        "selective_ac_option = \"x\"\n"));
      },
      "[activation_checkpoint] selective_ac_option", "is not 'op' or a positive integer");
  expect_input_error([] { read_torchtitan_toml(write_toml("syntax", "[model\nflavor = 1\n")); },
                     "line 1, column 7", "");
  expect_input_error([] { read_torchtitan_toml("/no/such.toml"); }, "", "cannot open file",
                     "/no/such.toml");
}

}  // namespace
}  // namespace shardplan
