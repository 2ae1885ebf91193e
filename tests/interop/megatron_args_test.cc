// Reading Megatron-LM command lines: Megatron's own example, its defaults (which differ from
// the zoo's), unknown and unmodelled arguments, and the errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/job.h"
#include "interop/stack_job.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

const std::string kExample = std::string(SHARDPLAN_SOURCE_DIR) +
                             "/tests/interop/data/megatron/train_llama3_8b_fsdp_h100_fp8.cmdline";

const std::string kMinimal =
    "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
    "--max-position-embeddings 1024 --micro-batch-size 2 --vocab-size 32000 ";

bool contains(const std::vector<std::string>& list, const std::string& text) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

// Megatron's example script for Llama 3 8B on 8 H100 with Megatron-FSDP and FP8.
TEST(MegatronArgs, ReadsMegatronsOwnLlama3Example) {
  JobParams p;
  p.from_megatron = kExample;
  p.cluster = "dgx-h100";
  const Job job = load_job(p);
  EXPECT_EQ(job.model.name, "llama3-8b");  // the zoo's model: the same shape
  EXPECT_EQ(job.cluster.num_gpus, 8);      // --nproc_per_node 8 --nnodes 1
  const FsdpConfig& c = job.config;
  EXPECT_EQ(c.sharding_strategy, ShardingStrategy::optim_grads_params);
  EXPECT_EQ(c.dp_shard, 8);
  EXPECT_EQ(c.tp, 1);
  EXPECT_FALSE(sequence_parallel(c));  // --sequence-parallel at tp 1: Megatron turns it off
  EXPECT_EQ(c.micro_batch, 1);
  EXPECT_EQ(c.grad_accum, 16);  // --global-batch-size 128 / (1 × 8)
  EXPECT_EQ(c.seq_len, 8192);
  EXPECT_TRUE(fp8_compute(c));  // --fp8-format hybrid
  EXPECT_EQ(c.fp8_recipe, Fp8Recipe::delayed);
  EXPECT_TRUE(c.fp8_param_gather);
  EXPECT_TRUE(c.double_buffer);      // --fsdp-double-buffer (and --use-nccl-ub)
  EXPECT_TRUE(c.async_reduce);       // --overlap-grad-reduce
  EXPECT_EQ(c.forward_prefetch, 1);  // --overlap-param-gather
  EXPECT_EQ(c.param_dtype, DType::bf16);
  EXPECT_EQ(c.main_param_dtype, DType::fp32);  // --megatron-fsdp-main-params-dtype default
  EXPECT_EQ(c.main_grad_dtype, DType::bf16);   // "auto": the parameters' dtype
  EXPECT_EQ(c.grad_reduce_dtype, DType::bf16);
  EXPECT_EQ(c.stack, Stack::megatron_te);
  const StackJob& s = *job.stack;
  EXPECT_TRUE(s.unknown.empty());
  EXPECT_TRUE(contains(s.not_modelled, "--cross-entropy-loss-fusion"));
  EXPECT_TRUE(contains(s.not_modelled, "--no-gradient-accumulation-fusion"));
  EXPECT_TRUE(contains(s.ignored, "--lr"));
  EXPECT_TRUE(contains(s.ignored,
                       "launcher: --master-addr localhost, --master-port 29500, "
                       "--nnodes 1, --node-rank 0, --nproc-per-node 8"));
  EXPECT_TRUE(contains(s.ignored,
                       "4 word(s) that are not arguments (python -m "
                       "torch.distributed.run pretrain_gpt.py)"));
  // Every flag lands somewhere: 43 ignored and 3 not modelled, beside the two above.
  EXPECT_EQ(s.ignored.size() + s.not_modelled.size(), 2u + 43u + 3u);
}

TEST(MegatronArgs, MegatronsDefaultsAreNotTheZoos) {
  const StackJob job = read_megatron_args(kMinimal);
  const nlohmann::json& m = job.model;
  EXPECT_EQ(m["norm"], "layernorm");          // --normalization LayerNorm
  EXPECT_EQ(m["mlp"], "gelu");                // no --swiglu
  EXPECT_EQ(m["ffn_hidden_size"], 4 * 1024);  // 4h
  EXPECT_EQ(m["bias"], true);                 // add_bias_linear
  EXPECT_EQ(m["tie_embeddings"], true);       // no --untie-embeddings-and-output-weights
  EXPECT_EQ(m["dropout"], true);              // hidden and attention dropout 0.1
  EXPECT_EQ(m["position_embedding"], "learned");
  EXPECT_EQ(m["max_position_embeddings"], 1024);
  EXPECT_FALSE(m.contains("num_kv_heads"));                // multi-head attention
  EXPECT_EQ(job.config["param_dtype"], "fp32");            // neither --bf16 nor --fp16
  EXPECT_EQ(job.config["sharding_strategy"], "no_shard");  // DDP without the distributed optimizer
  EXPECT_EQ(job.config["forward_prefetch"], 0);            // no --overlap-param-gather
  EXPECT_EQ(job.config["async_reduce"], false);
  EXPECT_TRUE(contains(job.not_modelled, "--use-megatron-fsdp"));
}

TEST(MegatronArgs, SwigluWidthAndQueryGroupsFollowMegatron) {
  // arguments.py: int((4h·2/3)/64)·64 with SwiGLU; 4096 → 10880, not Llama's 14336.
  StackJob job = read_megatron_args(
      "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu --seq-length 512 "
      "--max-position-embeddings 512 --micro-batch-size 1 --vocab-size 128256 "
      "--num-query-groups 8");
  EXPECT_EQ(job.model["ffn_hidden_size"], 10880);
  // --num-query-groups counts only with --group-query-attention.
  EXPECT_FALSE(job.model.contains("num_kv_heads"));
  EXPECT_TRUE(contains(job.not_modelled, "--num-query-groups 8"));
  job = read_megatron_args(
      "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu --seq-length 512 "
      "--max-position-embeddings 512 --micro-batch-size 1 --vocab-size 128256 "
      "--group-query-attention --num-query-groups 8");
  EXPECT_EQ(job.model["num_kv_heads"], 8);
}

TEST(MegatronArgs, PadsTheVocabularyAsMegatronDoes) {
  // GPT-2's 50,257 tokens pad to 50,304 (a multiple of 128).
  EXPECT_EQ(read_megatron_args(kMinimal + "--vocab-size 50257").model["vocab_size"], 50304);
  // The default tokenizer (GPT2BPETokenizer) without --vocab-size: 50,257 too.
  EXPECT_EQ(read_megatron_args(
                "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
                "--max-position-embeddings 1024 --micro-batch-size 2")
                .model["vocab_size"],
            50304);
  EXPECT_EQ(read_megatron_args(kMinimal + "--padded-vocab-size 50257").model["vocab_size"], 50257);
  // Another divisor pads to divisor × tp: 64 × 2.
  EXPECT_EQ(read_megatron_args(kMinimal + "--vocab-size 50257 --make-vocab-size-divisible-by 64 "
                                          "--tensor-model-parallel-size 2")
                .model["vocab_size"],
            50304);
  EXPECT_EQ(
      read_megatron_args(kMinimal + "--vocab-size 50000 --no-pad-vocab-size").model["vocab_size"],
      50000);
}

TEST(MegatronArgs, ListsUnknownArgumentsWithTheNearestFlag) {
  // allow_abbrev=False: a prefix is not a flag.
  const StackJob job =
      read_megatron_args(kMinimal + "--micro-batch 4 --tensor-model-paralel-size 2 stray");
  EXPECT_TRUE(contains(job.unknown, "--micro-batch (did you mean --micro-batch-size?)"));
  EXPECT_TRUE(contains(job.unknown,
                       "--tensor-model-paralel-size (did you mean "
                       "--tensor-model-parallel-size?)"));
  EXPECT_EQ(job.config["micro_batch"], 2);  // the unknown flag's value is not taken
}

TEST(MegatronArgs, LauncherGivesTheGpus) {
  const StackJob job = read_megatron_args(
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun --nproc_per_node=4 --nnodes 2 "
      "pretrain_gpt.py " +
      kMinimal);
  EXPECT_EQ(job.gpus, 8);
  EXPECT_EQ(job.config["allocator"], "expandable");
}

TEST(MegatronArgs, ReadsABashArrayFile) {
  const std::string text =
      "# a launch script's arrays\n"
      "MODEL_ARGS=(\n  --num-layers 2  # two layers\n  --hidden-size 1024\n"
      "  --num-attention-heads 16\n)\nTRAIN=( --seq-length 512 --max-position-embeddings \\\n"
      "  1024 --micro-batch-size 2 --vocab-size 32000 --split '99,1,0' \"--bf16\" )\n";
  const StackJob job = read_megatron_args(text);
  EXPECT_EQ(job.model["num_layers"], 2);
  EXPECT_EQ(job.model["max_position_embeddings"], 1024);
  EXPECT_EQ(job.config["param_dtype"], "bf16");
  EXPECT_TRUE(job.unknown.empty());
}

TEST(MegatronArgs, MixtureOfExpertsAndFlexDispatch) {
  const StackJob job = read_megatron_args(
      kMinimal +
      "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
      "--moe-shared-expert-intermediate-size 1024 --moe-layer-freq '([0]*1+[1]*1)' "
      "--expert-model-parallel-size 4 --moe-token-dispatcher-type flex "
      "--moe-flex-dispatcher-backend hybridep --moe-expert-capacity-factor 1.5 --bf16 "
      "--use-megatron-fsdp --moe-grouped-gemm");
  EXPECT_EQ(job.model["family"], "moe");
  EXPECT_EQ(job.model["num_shared_experts"], 2);  // 1024 / 512
  EXPECT_EQ(job.model["moe_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(job.config["ep"], 4);
  EXPECT_EQ(job.config["moe_dispatcher"], "hybridep");
  EXPECT_EQ(job.config["moe_capacity_factor"], 1.5);
}

TEST(MegatronArgs, RecomputeModulesAreRead) {
  const StackJob job = read_megatron_args(kMinimal +
                                          "--recompute-granularity selective --recompute-modules "
                                          "layernorm moe_act --bf16");
  EXPECT_EQ(job.config["recompute"], "selective");
  EXPECT_EQ(job.config["recompute_modules"], nlohmann::json({"layernorm", "moe_act"}));
  EXPECT_FALSE(contains(job.not_modelled, "--recompute-modules"));
  // Megatron's default list (core_attn alone) when none is given.
  EXPECT_FALSE(read_megatron_args(kMinimal + "--recompute-activations")
                   .config.contains("recompute_modules"));
  // Read only under selective; ignored (as Megatron does) under full.
  const StackJob full = read_megatron_args(kMinimal +
                                           "--recompute-granularity full --recompute-method "
                                           "uniform --recompute-num-layers 1 --recompute-modules "
                                           "moe_act");
  EXPECT_FALSE(full.config.contains("recompute_modules"));
  testing::expect_input_error(
      [] {
        read_megatron_args(kMinimal +
                           "--recompute-granularity selective --recompute-modules gdn_norm_out");
      },
      "--recompute-modules", "is not a recompute module shardplan models");
  testing::expect_input_error(
      [] {
        read_megatron_args(kMinimal +
                           "--recompute-granularity selective --recompute-modules moe_act "
                           "--bf16 --fp8-format hybrid");
      },
      "--recompute-modules", "refused under FP8 delayed scaling");
}

// --cuda-graph-impl with --cuda-graph-modules (and their deprecated spellings) as
// shardplan's cuda_graphs.
TEST(MegatronArgs, CudaGraphSettingsAreRead) {
  auto graphs = [](const std::string& extra) {
    const StackJob job = read_megatron_args(kMinimal + extra);
    EXPECT_FALSE(contains(job.not_modelled, "cuda-graph")) << extra;
    return job.config.value("cuda_graphs", nlohmann::json());
  };
  EXPECT_EQ(graphs("--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router "
                   "moe_preprocess"),
            nlohmann::json({"attn", "moe_router", "moe_preprocess"}));
  EXPECT_EQ(graphs("--cuda-graph-impl local"), nlohmann::json({"layer"}));
  EXPECT_EQ(graphs("--cuda-graph-impl full_iteration"), nlohmann::json({"full_iteration"}));
  EXPECT_EQ(graphs("--enable-cuda-graph"), nlohmann::json({"layer"}));
  EXPECT_EQ(graphs("--external-cuda-graph --cuda-graph-scope attn,mlp"),
            nlohmann::json({"attn", "mlp"}));
  EXPECT_EQ(graphs("--cuda-graph-impl local --cuda-graph-scope full_iteration"),
            nlohmann::json({"full_iteration"}));
  // Without an implementation the list has no effect, as in Megatron, except the deprecated
  // full_iteration module, which sets the implementation.
  EXPECT_TRUE(graphs("--cuda-graph-modules attn").is_null());
  EXPECT_EQ(graphs("--cuda-graph-modules full_iteration"), nlohmann::json({"full_iteration"}));
  // The local implementation captures the router and the preprocessing together.
  EXPECT_EQ(graphs("--cuda-graph-impl local --cuda-graph-modules attn moe_router"),
            nlohmann::json({"attn", "moe_router", "moe_preprocess"}));
  testing::expect_input_error(
      [] {
        read_megatron_args(kMinimal +
                           "--cuda-graph-impl transformer_engine --cuda-graph-modules "
                           "full_iteration");
      },
      "--cuda-graph-modules", "transformer_engine");
  testing::expect_input_error(
      [] {
        read_megatron_args(kMinimal +
                           "--cuda-graph-impl transformer_engine --cuda-graph-modules mamba");
      },
      "--cuda-graph-modules", "Mamba");
  testing::expect_input_error(
      [] {
        read_megatron_args(kMinimal + "--cuda-graph-impl full_iteration --cuda-graph-modules attn");
      },
      "--cuda-graph-modules", "must be empty");
}

TEST(MegatronArgs, RecomputeAndPrecisionChoices) {
  StackJob job = read_megatron_args(kMinimal +
                                    "--recompute-granularity full --recompute-method block "
                                    "--recompute-num-layers 1 --use-megatron-fsdp --bf16 "
                                    "--megatron-fsdp-main-grads-dtype fp32 --fp8-format e4m3 "
                                    "--fp8-recipe tensorwise");
  EXPECT_EQ(job.config["recompute"], "full");
  EXPECT_TRUE(contains(job.not_modelled, "--recompute-num-layers 1"));  // 1 of 2 layers
  EXPECT_EQ(job.config["main_grad_dtype"], "fp32");
  EXPECT_EQ(job.config["grad_reduce_dtype"], "fp32");  // the comm dtype follows the grads
  EXPECT_EQ(job.config["fp8_recipe"], "delayed");
  EXPECT_TRUE(contains(job.not_modelled, "--fp8-recipe tensorwise"));
  // DDP: bf16 reduces gradients in fp32 unless --grad-reduce-in-bf16.
  job = read_megatron_args(kMinimal + "--bf16 --use-distributed-optimizer");
  EXPECT_EQ(job.config["sharding_strategy"], "optim");
  EXPECT_EQ(job.config["main_grad_dtype"], "fp32");
  job = read_megatron_args(kMinimal + "--bf16 --use-distributed-optimizer --grad-reduce-in-bf16");
  EXPECT_EQ(job.config["grad_reduce_dtype"], "bf16");
}

TEST(MegatronArgs, ErrorsNameTheFlag) {
  using testing::expect_input_error;
  expect_input_error([] { read_megatron_args("--hidden-size 1024 --num-attention-heads 16"); },
                     "--num-layers", "is required");
  expect_input_error([] { read_megatron_args(kMinimal + "--tensor-model-parallel-size two"); },
                     "--tensor-model-parallel-size", "expected a number, got 'two'");
  expect_input_error([] { read_megatron_args(kMinimal + "--tensor-model-parallel-size $TP"); },
                     "--tensor-model-parallel-size", "a shell variable or command left unexpanded");
  expect_input_error([] { read_megatron_args(kMinimal + "--pipeline-model-parallel-size 4"); },
                     "--pipeline-model-parallel-size", "pipeline parallelism is not modelled");
  expect_input_error([] { read_megatron_args(kMinimal + "--recompute-granularity full"); },
                     "--recompute-method", "is required with --recompute-granularity full");
  expect_input_error([] { read_megatron_args(kMinimal + "--swiglu=yes"); }, "--swiglu",
                     "takes no value");
  expect_input_error([] { read_megatron_args(kMinimal + "--split '99,1"); }, "line 1",
                     "unclosed ' quote", "--from-megatron");
  expect_input_error([] { read_megatron_args("/no/such/args.sh"); }, "", "cannot open file",
                     "/no/such/args.sh");
  expect_input_error(
      [] { read_megatron_args(kMinimal + "--num-experts 4 --moe-layer-freq '([1]*3'"); },
      "--moe-layer-freq", "cannot read");
}

TEST(MegatronArgs, GlobalBatchMustDivide) {
  JobParams p;
  p.from_megatron = kMinimal + "--global-batch-size 100";
  p.gpus = 8;  // the default cluster
  testing::expect_input_error([&] { load_job(p); }, "global batch",
                              "100 sequences is not a multiple of micro-batch 2 × 8");
}

}  // namespace
}  // namespace shardplan
