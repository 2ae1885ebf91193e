#include "planner/fsdp_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <utility>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "models/transformer_builder.h"
#include "planner/internal/fsdp_units.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

constexpr NameTable<ShardingStrategy, 4> kStrategies = {{
    {ShardingStrategy::no_shard, "no_shard"},
    {ShardingStrategy::optim, "optim"},
    {ShardingStrategy::optim_grads, "optim_grads"},
    {ShardingStrategy::optim_grads_params, "optim_grads_params"},
}};
constexpr NameTable<OuterStrategy, 2> kOuter = {{
    {OuterStrategy::no_shard, "no_shard"},
    {OuterStrategy::optim, "optim"},
}};
constexpr NameTable<Fp8Recipe, 2> kRecipes = {{
    {Fp8Recipe::delayed, "delayed"},
    {Fp8Recipe::mxfp8, "mxfp8"},
}};
constexpr NameTable<Allocator, 3> kAllocators = {{
    {Allocator::pool, "pool"},
    {Allocator::caching, "caching"},
    {Allocator::expandable, "expandable"},
}};
constexpr NameTable<SdpaBackend, 2> kSdpaBackends = {{
    {SdpaBackend::flash, "flash"},
    {SdpaBackend::cudnn, "cudnn"},
}};
constexpr NameTable<Optimizer, 2> kOptimizers = {{
    {Optimizer::adam, "adam"},
    {Optimizer::sgd, "sgd"},
}};

template <typename Enum, std::size_t N>
Enum parse_enum(const JsonReader& r, std::string_view key, const NameTable<Enum, N>& table,
                Enum fallback) {
  if (!r.has(key)) return fallback;
  const std::string text = r.string(key);
  if (auto value = value_of(table, text)) return *value;
  r.fail(key, unknown_name_message(std::string(key) + " value", text, names_of(table)));
}

DType dtype_field(const JsonReader& r, std::string_view key, DType fallback) {
  if (!r.has(key)) return fallback;
  return parse_dtype(r.string(key), r.file(), r.path_of(key));
}

}  // namespace

std::string recompute_label(const FsdpConfig& config) {
  if (config.recompute == Recompute::sac_layer) {
    return fmt::format("sac_layer/{}", config.recompute_every);
  }
  if (config.recompute == Recompute::selective && config.recompute_modules != RecomputeModules{}) {
    // '+' joins them: the label stands in CSV cells and comma-separated lists.
    return fmt::format("selective({})",
                       fmt::join(recompute_module_list(config.recompute_modules), "+"));
  }
  return std::string(recompute_name(config.recompute));
}

bool fp8_compute(const FsdpConfig& config) {
  return config.fp8.value_or(config.fp8_param_gather);
}

bool torch_fsdp_layout(const FsdpConfig& config) {
  return config.stack != Stack::megatron_te &&
         config.sharding_strategy == ShardingStrategy::optim_grads_params &&
         !(config.fp8_param_gather && config.fp8_recipe == Fp8Recipe::mxfp8);
}

DType optimizer_state_dtype(const FsdpConfig& config) {
  return config.stack == Stack::megatron_te ? DType::fp32 : config.main_param_dtype;
}

DType accumulated_grad_dtype(const FsdpConfig& config) {
  return config.grad_reduce_dtype != config.param_dtype ? config.grad_reduce_dtype
                                                        : config.param_dtype;
}

bool sequence_parallel(const FsdpConfig& config) {
  return config.sequence_parallel.value_or(config.tp > 1);
}

ModelParallel model_parallel(const FsdpConfig& config) {
  ModelParallel p{.tp = config.tp,
                  .sequence_parallel = sequence_parallel(config),
                  .cp = config.cp,
                  .cp_comm = config.cp_comm,
                  .vocab_parallel_loss = config.vocab_parallel_loss,
                  .vocab_parallel_embedding = config.vocab_parallel_embedding};
  // The busiest rank's load matters only where ranks hold different experts, or where a
  // capacity drops tokens.
  if (config.ep > 1 || config.moe_capacity_factor) {
    p.moe_imbalance = config.moe_imbalance;
    p.moe_capacity_factor = config.moe_capacity_factor.value_or(0.0);
  }
  p.ep = config.ep;
  p.etp = expert_tp(config);
  p.moe_dispatcher = config.moe_dispatcher;
  return p;
}

int64_t expert_tp(const FsdpConfig& config) {
  return config.etp > 0 ? config.etp : config.tp;
}

bool expert_mesh(const FsdpConfig& config) {
  return config.ep > 1 || expert_tp(config) != config.tp;
}

int64_t expert_dp(const FsdpConfig& config) {
  return config.dp_outer * config.dp_shard * config.cp * config.tp /
         (config.ep * expert_tp(config));
}

std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text) {
  return value_of(kStrategies, text);
}
std::optional<OuterStrategy> parse_outer_strategy(std::string_view text) {
  return value_of(kOuter, text);
}
std::optional<Allocator> parse_allocator(std::string_view text) {
  return value_of(kAllocators, text);
}
std::vector<std::string> sharding_strategy_names() {
  return names_of(kStrategies);
}
std::vector<std::string> outer_strategy_names() {
  return names_of(kOuter);
}
std::vector<std::string> allocator_names() {
  return names_of(kAllocators);
}

std::string_view sharding_strategy_name(ShardingStrategy s) {
  return name_of(kStrategies, s);
}
std::string_view outer_strategy_name(OuterStrategy s) {
  return name_of(kOuter, s);
}
std::string_view fp8_recipe_name(Fp8Recipe r) {
  return name_of(kRecipes, r);
}
std::string_view sdpa_backend_name(SdpaBackend b) {
  return name_of(kSdpaBackends, b);
}

std::string_view allocator_name(Allocator a) {
  return name_of(kAllocators, a);
}
std::string_view optimizer_name(Optimizer o) {
  return name_of(kOptimizers, o);
}

const std::vector<std::string>& fsdp_config_keys() {
  static const std::vector<std::string> keys = {"sharding_strategy",
                                                "dp_shard",
                                                "dp_outer",
                                                "tp",
                                                "sequence_parallel",
                                                "tp_comm_overlap",
                                                "vocab_parallel_loss",
                                                "vocab_parallel_embedding",
                                                "cp",
                                                "cp_comm",
                                                "ep",
                                                "etp",
                                                "moe_dispatcher",
                                                "moe_capacity_factor",
                                                "moe_imbalance",
                                                "outer_strategy",
                                                "unit_modules",
                                                "bucket_bytes",
                                                "forward_prefetch",
                                                "backward_prefetch",
                                                "async_reduce",
                                                "max_live_grad_buffers",
                                                "recompute",
                                                "recompute_every",
                                                "recompute_modules",
                                                "cuda_graphs",
                                                "micro_batch",
                                                "grad_accum",
                                                "seq_len",
                                                "param_dtype",
                                                "main_param_dtype",
                                                "main_grad_dtype",
                                                "grad_reduce_dtype",
                                                "fp8",
                                                "fp8_param_gather",
                                                "fp8_recipe",
                                                "fine_grained_param_gather",
                                                "keep_fp8_transpose_cache",
                                                "double_buffer",
                                                "allocator",
                                                "stack",
                                                "optimizer",
                                                "offload_activations",
                                                "sdpa_backend",
                                                "fused_rms_norm",
                                                "no_sync",
                                                "loss_kernel"};
  return keys;
}

namespace {

// Deeper than the model has units is the same as all of them.
constexpr int64_t kMaxDepth = int64_t{1} << 20;

// The range of each whole-number field (the reader checks a file's values against these
// too, with their JSON types).
struct FieldRange {
  const char* key;
  int64_t FsdpConfig::*field;
  int64_t lo, hi;
};
constexpr FieldRange kRanges[] = {
    {"dp_shard", &FsdpConfig::dp_shard, 0, limits::kMaxGpus},  // 0: GPUs ÷ dp_outer
    {"dp_outer", &FsdpConfig::dp_outer, 1, limits::kMaxGpus},
    {"tp", &FsdpConfig::tp, 1, limits::kMaxGpus},
    {"cp", &FsdpConfig::cp, 1, limits::kMaxGpus},
    {"ep", &FsdpConfig::ep, 1, limits::kMaxGpus},
    {"etp", &FsdpConfig::etp, 0, limits::kMaxGpus},  // 0: tp
    {"forward_prefetch", &FsdpConfig::forward_prefetch, 0, kMaxDepth},
    {"backward_prefetch", &FsdpConfig::backward_prefetch, 0, kMaxDepth},
    {"max_live_grad_buffers", &FsdpConfig::max_live_grad_buffers, 1, kMaxDepth},
    {"recompute_every", &FsdpConfig::recompute_every, 1, kMaxDepth},
    {"micro_batch", &FsdpConfig::micro_batch, 1, limits::kMaxTokensPerMicroBatch},
    {"grad_accum", &FsdpConfig::grad_accum, 1, limits::kMaxGradAccum},
    {"seq_len", &FsdpConfig::seq_len, 1, limits::kMaxTokensPerMicroBatch},
};

}  // namespace

void check_fsdp_config(const FsdpConfig& c, const std::string& label) {
  auto fail = [&](std::string_view key, const std::string& reason) {
    throw InputError(label, "/" + std::string(key), reason);
  };
  for (const FieldRange& range : kRanges) {
    if (auto reason = out_of_range_reason(c.*range.field, range.lo, range.hi))
      fail(range.key, *reason);
  }
  if (c.bucket_bytes) {
    if (auto reason = out_of_range_reason(*c.bucket_bytes, 1, limits::kMaxPoolBytes))
      fail("bucket_bytes", *reason);
  }
  if (c.micro_batch > limits::kMaxTokensPerMicroBatch / c.seq_len) {
    fail(c.micro_batch > 1 ? "micro_batch" : "seq_len",
         fmt::format("micro_batch × seq_len = {} × {} tokens exceeds {} (2^24) per micro-batch",
                     c.micro_batch, c.seq_len, limits::kMaxTokensPerMicroBatch));
  }
  if (c.sequence_parallel.value_or(false) && c.tp == 1) {
    fail("sequence_parallel", "splits activations over tensor-parallel ranks; set tp > 1");
  }
  if (!c.vocab_parallel_loss && c.tp == 1) {
    fail("vocab_parallel_loss", "gathers the logits over tensor-parallel ranks; set tp > 1");
  }
  if (!c.vocab_parallel_embedding && c.tp == 1) {
    fail("vocab_parallel_embedding",
         "replicates the embedding over tensor-parallel ranks; set tp > 1");
  }
  if (!c.vocab_parallel_embedding && c.stack == Stack::megatron_te) {
    fail("vocab_parallel_embedding",
         "Megatron always splits the embedding over the vocabulary (VocabParallelEmbedding); "
         "a replicated one is a PyTorch TP plan: set stack torch-compile or torch-eager");
  }
  if (c.tp_comm_overlap && !sequence_parallel(c)) {
    fail("tp_comm_overlap",
         c.tp == 1 ? std::string("overlaps tensor-parallel collectives; set tp > 1")
                   : std::string("Transformer Engine overlaps the all-gathers and reduce-scatters "
                                 "of sequence parallelism only; set sequence_parallel: true"));
  }
  // Load-balanced causal context parallelism cuts each sequence into 2·cp chunks, rank r
  // holding chunks r and 2·cp − 1 − r (Megatron's get_batch_on_this_cp_rank).
  if (c.cp > 1 && c.seq_len % (2 * c.cp) != 0) {
    fail("seq_len", fmt::format("context parallelism splits each sequence into 2·cp = {} "
                                "load-balanced chunks; {} is not a multiple of {}",
                                2 * c.cp, c.seq_len, 2 * c.cp));
  }
  if (sequence_parallel(c) && (c.seq_len / c.cp) % c.tp != 0) {
    fail("seq_len",
         fmt::format("sequence parallelism splits each rank's {} tokens (seq_len {}{}) over tp = "
                     "{} ranks; make seq_len{} a multiple of {}",
                     c.seq_len / c.cp, c.seq_len, c.cp > 1 ? fmt::format(" / cp {}", c.cp) : "",
                     c.tp, c.cp > 1 ? " / cp" : "", c.tp));
  }
  if (c.moe_capacity_factor && !(*c.moe_capacity_factor > 0 && *c.moe_capacity_factor <= 1e6)) {
    fail("moe_capacity_factor", fmt::format("must be in (0, 1e6], got {}", *c.moe_capacity_factor));
  }
  if (!(c.moe_imbalance >= 1.0 && c.moe_imbalance <= 1e6)) {
    fail("moe_imbalance",
         fmt::format("is the busiest expert's tokens ÷ the mean, at least 1; got {}",
                     c.moe_imbalance));
  }
  if (expert_mesh(c) && c.dp_outer > 1) {
    fail("dp_outer",
         "HSDP with an expert mesh (ep > 1 or etp ≠ tp) is not modelled (Megatron-FSDP's "
         "expert mesh shards experts over one expert-data-parallel dimension); set dp_outer: 1");
  }
  if (deduplicates_tokens(c.moe_dispatcher) && expert_tp(c) > 1) {
    fail("etp", fmt::format("the {} dispatcher with expert tensor parallelism is not modelled; set "
                            "etp: 1",
                            moe_dispatcher_name(c.moe_dispatcher)));
  }
  if (expert_mesh(c) && c.double_buffer) {
    fail("double_buffer",
         "double buffering with an expert mesh (ep > 1 or etp ≠ tp) is not modelled: experts "
         "gather over their own group into buffers of their own; set double_buffer: false");
  }
  // Combinations Megatron-FSDP does not support (seeds/002 README).
  const bool zero3 = sharding_traits(c).shard_params;
  if (c.fp8_param_gather && !fp8_compute(c)) {
    fail("fp8",
         "fp8_param_gather gathers FP8 weights for FP8 GEMMs; set fp8: true or "
         "fp8_param_gather: false");
  }
  if (fp8_compute(c) && !c.fp8_param_gather && zero3) {
    fail("fp8",
         "FP8 GEMMs on bf16 weights under optim_grads_params are not modelled (where "
         "Transformer Engine keeps the FP8 casts of each gathered unit depends on the "
         "stack); set fp8_param_gather: true");
  }
  if (c.fp8_param_gather && !zero3) {
    fail("fp8_param_gather", fmt::format("needs sharding_strategy optim_grads_params (only "
                                         "ZeRO-3 supports FP8 parameters), got {}",
                                         sharding_strategy_name(c.sharding_strategy)));
  }
  if (c.keep_fp8_transpose_cache && !c.fp8_param_gather) {
    fail("keep_fp8_transpose_cache", "only applies with fp8_param_gather: true");
  }
  if (c.fine_grained_param_gather && !zero3) {
    fail("fine_grained_param_gather",
         "needs sharding_strategy optim_grads_params (parameters are only gathered when "
         "they are sharded)");
  }
  if (c.outer_strategy == OuterStrategy::optim && !zero3) {
    fail("outer_strategy", "optim needs sharding_strategy optim_grads_params");
  }
  if (c.outer_strategy == OuterStrategy::optim && c.dp_outer == 1) {
    fail("outer_strategy", "optim shards over dp_outer, which is 1; set dp_outer > 1");
  }
  if (c.double_buffer && !sharding_traits(c).shard_grads) {
    fail("double_buffer",
         "needs optim_grads or optim_grads_params: other strategies have "
         "no transient unsharded buffers to double-buffer");
  }
  if (c.double_buffer && (c.forward_prefetch > 1 || c.backward_prefetch > 1)) {
    fail(c.forward_prefetch > 1 ? "forward_prefetch" : "backward_prefetch",
         "double_buffer holds two units at a time, so prefetch must be 0 or 1");
  }
  if (c.double_buffer && c.max_live_grad_buffers > 2) {
    fail("max_live_grad_buffers", "double_buffer holds two gradient buffers, so at most 2");
  }
  if (c.no_sync) {
    if (c.stack == Stack::megatron_te) {
      fail("no_sync",
           "is PyTorch FSDP's gradient accumulation (set_requires_gradient_sync(False)); "
           "Megatron-FSDP reduces every micro-batch into its sharded main grads: set stack "
           "torch-compile or torch-eager");
    }
    if (!torch_fsdp_layout(c)) {
      fail(
          "no_sync",
          fmt::format("defers the reduce-scatter of sharded gradients; it needs sharding_strategy "
                      "optim_grads_params (got {}{}), as no_shard and optim already reduce "
                      "in the last micro-batch only",
                      sharding_strategy_name(c.sharding_strategy),
                      c.fp8_recipe == Fp8Recipe::mxfp8 && c.fp8_param_gather ? " with mxfp8" : ""));
    }
    if (c.double_buffer) {
      fail("no_sync",
           "keeps every unit's gradients unsharded across micro-batches; "
           "double_buffer holds two: set double_buffer: false");
    }
    if (c.grad_accum == 1) {
      fail("no_sync",
           "defers the reduction to the last micro-batch; with grad_accum 1 there is "
           "nothing to defer: set grad_accum > 1");
    }
  }
}

FsdpConfig fsdp_config_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only(fsdp_config_keys());
  FsdpConfig c;
  c.sharding_strategy = parse_enum(r, "sharding_strategy", kStrategies, c.sharding_strategy);
  c.dp_shard = r.integer_in_or("dp_shard", 1, limits::kMaxGpus, 0);
  c.dp_outer = r.integer_in_or("dp_outer", 1, limits::kMaxGpus, 1);
  c.tp = r.integer_in_or("tp", 1, limits::kMaxGpus, c.tp);
  if (r.has("sequence_parallel")) c.sequence_parallel = r.boolean("sequence_parallel");
  c.tp_comm_overlap = r.boolean_or("tp_comm_overlap", c.tp_comm_overlap);
  c.vocab_parallel_loss = r.boolean_or("vocab_parallel_loss", c.vocab_parallel_loss);
  c.vocab_parallel_embedding = r.boolean_or("vocab_parallel_embedding", c.vocab_parallel_embedding);
  c.cp = r.integer_in_or("cp", 1, limits::kMaxGpus, c.cp);
  if (r.has("cp_comm")) {
    const std::string text = r.string("cp_comm");
    const std::optional<CpComm> value = parse_cp_comm(text);
    if (!value) r.fail("cp_comm", unknown_name_message("cp_comm value", text, cp_comm_names()));
    c.cp_comm = *value;
  }
  c.ep = r.integer_in_or("ep", 1, limits::kMaxGpus, c.ep);
  c.etp = r.integer_in_or("etp", 1, limits::kMaxGpus, c.etp);
  if (r.has("moe_dispatcher")) {
    const std::string text = r.string("moe_dispatcher");
    const std::optional<MoeDispatcher> value = parse_moe_dispatcher(text);
    if (!value) {
      r.fail("moe_dispatcher",
             unknown_name_message("moe_dispatcher value", text, moe_dispatcher_names()) +
                 (text == "flex" ? " (Megatron's flex dispatcher runs deepep or hybridep)" : ""));
    }
    c.moe_dispatcher = *value;
  }
  if (r.has("moe_capacity_factor")) c.moe_capacity_factor = r.number("moe_capacity_factor");
  c.moe_imbalance = r.number_or("moe_imbalance", c.moe_imbalance);
  c.outer_strategy = parse_enum(r, "outer_strategy", kOuter, c.outer_strategy);
  if (r.has("unit_modules")) {
    c.unit_modules = r.strings("unit_modules");
    if (c.unit_modules.empty()) r.fail("unit_modules", "must name at least one pattern");
  }
  if (r.has("bucket_bytes"))
    c.bucket_bytes = r.integer_in("bucket_bytes", 1, limits::kMaxPoolBytes);
  c.forward_prefetch = r.integer_in_or("forward_prefetch", 0, kMaxDepth, c.forward_prefetch);
  c.backward_prefetch = r.integer_in_or("backward_prefetch", 0, kMaxDepth, c.backward_prefetch);
  c.async_reduce = r.boolean_or("async_reduce", c.async_reduce);
  c.max_live_grad_buffers =
      r.integer_in_or("max_live_grad_buffers", 1, kMaxDepth, c.max_live_grad_buffers);
  if (r.has("recompute")) {
    c.recompute = parse_recompute(r.string("recompute"), r.file(), r.path_of("recompute"));
  }
  if (r.has("stack")) c.stack = parse_stack(r.string("stack"), r.file(), r.path_of("stack"));
  if (r.has("recompute_every")) {
    if (c.recompute != Recompute::sac_layer) {
      r.fail("recompute_every",
             "counts the layers sac_layer checkpoints; set recompute: sac_layer");
    }
    c.recompute_every = r.integer_in("recompute_every", 1, kMaxDepth);
  }
  if (r.has("recompute_modules")) {
    // Megatron reads --recompute-modules only under --recompute-granularity selective.
    if (c.recompute != Recompute::selective) {
      r.fail("recompute_modules",
             "lists what selective recompute re-runs (Megatron's --recompute-modules); set "
             "recompute: selective");
    }
    c.recompute_modules = parse_recompute_modules(r.strings("recompute_modules"), r.file(),
                                                  r.path_of("recompute_modules"));
  }
  if (r.has("cuda_graphs")) {
    c.cuda_graphs =
        parse_cuda_graph_scopes(r.strings("cuda_graphs"), r.file(), r.path_of("cuda_graphs"));
  }
  c.micro_batch = r.integer_in_or("micro_batch", 1, limits::kMaxTokensPerMicroBatch, c.micro_batch);
  c.grad_accum = r.integer_in_or("grad_accum", 1, limits::kMaxGradAccum, c.grad_accum);
  c.seq_len = r.integer_in_or("seq_len", 1, limits::kMaxTokensPerMicroBatch, c.seq_len);
  c.param_dtype = dtype_field(r, "param_dtype", c.param_dtype);
  if (dtype_bytes(c.param_dtype) == 1) {
    r.fail("param_dtype",
           "FP8 parameters are kept in bf16/fp16 and gathered in FP8: set "
           "fp8_param_gather instead");
  }
  c.main_param_dtype = dtype_field(r, "main_param_dtype", c.main_param_dtype);
  // Main grads follow the parameter dtype unless set (Megatron's grad_reduce_in_fp32=False);
  // on the torch stacks the main weights' (PyTorch keeps .grad in the sharded parameter's
  // dtype, and torchtitan reduces in fp32: mixed_precision_reduce "float32"). The reduction
  // follows the main grads.
  c.main_grad_dtype = dtype_field(
      r, "main_grad_dtype", c.stack == Stack::megatron_te ? c.param_dtype : c.main_param_dtype);
  c.grad_reduce_dtype = dtype_field(r, "grad_reduce_dtype", c.main_grad_dtype);
  for (const char* key : {"main_param_dtype", "main_grad_dtype", "grad_reduce_dtype"}) {
    if (r.has(key) && dtype_bytes(parse_dtype(r.string(key), r.file(), r.path_of(key))) == 1) {
      r.fail(key, "must be fp32, bf16 or fp16");
    }
  }
  if (r.has("fp8")) c.fp8 = r.boolean("fp8");
  c.fp8_param_gather = r.boolean_or("fp8_param_gather", c.fp8_param_gather);
  c.fp8_recipe = parse_enum(r, "fp8_recipe", kRecipes, c.fp8_recipe);
  c.fine_grained_param_gather =
      r.boolean_or("fine_grained_param_gather", c.fine_grained_param_gather);
  c.keep_fp8_transpose_cache = r.boolean_or("keep_fp8_transpose_cache", c.keep_fp8_transpose_cache);
  c.double_buffer = r.boolean_or("double_buffer", c.double_buffer);
  c.allocator = parse_enum(r, "allocator", kAllocators, c.allocator);
  c.optimizer = parse_enum(r, "optimizer", kOptimizers, c.optimizer);
  c.offload_activations =
      r.integer_in_or("offload_activations", 0, kMaxDepth, c.offload_activations);
  c.sdpa_backend = parse_enum(r, "sdpa_backend", kSdpaBackends, c.sdpa_backend);
  c.fused_rms_norm = r.boolean_or("fused_rms_norm", c.fused_rms_norm);
  c.no_sync = r.boolean_or("no_sync", c.no_sync);
  // torch.compile jobs compile the loss too (torchtitan since April 2025), eager ones run it
  // on fp32 logits (torchtitan's cross_entropy(pred.float())).
  c.loss_kernel = c.stack == Stack::torch_compile ? LossKernel::compiled : LossKernel::upcast;
  if (r.has("loss_kernel")) {
    const std::string text = r.string("loss_kernel");
    const std::optional<LossKernel> value = parse_loss_kernel(text);
    if (!value) {
      r.fail("loss_kernel", unknown_name_message("loss_kernel value", text, loss_kernel_names()));
    }
    c.loss_kernel = *value;
  }
  if (r.has("loss_kernel") && c.stack == Stack::megatron_te) {
    r.fail("loss_kernel",
           "says how PyTorch runs the cross entropy on the torch stacks; Megatron's fused "
           "cross entropy always works in fp32: set stack torch-compile or torch-eager");
  }
  if (r.has("fused_rms_norm") && c.stack != Stack::torch_eager) {
    r.fail("fused_rms_norm",
           "picks eager PyTorch's RMSNorm kernel; it matters on stack torch-eager only "
           "(Transformer Engine and torch.compile fuse the norm)");
  }
  if (r.has("sdpa_backend") && c.stack == Stack::megatron_te) {
    r.fail("sdpa_backend",
           "picks PyTorch's attention kernel on the torch stacks; Transformer Engine (stack "
           "megatron-te) runs its own fused attention: set stack torch-compile or torch-eager");
  }

  // A JSON-level rule: the key was given where it has no effect.
  if (r.has("fp8_recipe") && !fp8_compute(c)) {
    r.fail("fp8_recipe", "only applies with fp8: true (or fp8_param_gather: true)");
  }
  if (r.has("cp_comm") && c.cp == 1) r.fail("cp_comm", "only applies with cp > 1");
  check_fsdp_config(c, label);
  return c;
}

nlohmann::json fsdp_config_to_json(const FsdpConfig& c) {
  nlohmann::json j;
  j["sharding_strategy"] = sharding_strategy_name(c.sharding_strategy);
  if (c.dp_shard > 0) j["dp_shard"] = c.dp_shard;
  j["dp_outer"] = c.dp_outer;
  j["tp"] = c.tp;
  if (c.tp > 1 || c.sequence_parallel.has_value()) j["sequence_parallel"] = sequence_parallel(c);
  j["tp_comm_overlap"] = c.tp_comm_overlap;
  if (!c.vocab_parallel_loss) j["vocab_parallel_loss"] = false;
  if (!c.vocab_parallel_embedding) j["vocab_parallel_embedding"] = false;
  j["cp"] = c.cp;
  if (c.cp > 1) j["cp_comm"] = cp_comm_name(c.cp_comm);
  // The expert fields where they differ from the defaults (every dense job's).
  if (c.ep > 1) j["ep"] = c.ep;
  if (c.etp > 0 && c.etp != c.tp) j["etp"] = c.etp;
  if (c.moe_dispatcher != MoeDispatcher::allgather)
    j["moe_dispatcher"] = moe_dispatcher_name(c.moe_dispatcher);
  if (c.moe_capacity_factor) j["moe_capacity_factor"] = *c.moe_capacity_factor;
  if (c.moe_imbalance != kDefaultMoeImbalance) j["moe_imbalance"] = c.moe_imbalance;
  j["outer_strategy"] = outer_strategy_name(c.outer_strategy);
  if (!c.unit_modules.empty()) j["unit_modules"] = c.unit_modules;
  if (c.bucket_bytes) j["bucket_bytes"] = *c.bucket_bytes;
  j["forward_prefetch"] = c.forward_prefetch;
  j["backward_prefetch"] = c.backward_prefetch;
  j["async_reduce"] = c.async_reduce;
  j["max_live_grad_buffers"] = c.max_live_grad_buffers;
  j["recompute"] = recompute_name(c.recompute);
  if (c.recompute == Recompute::sac_layer) j["recompute_every"] = c.recompute_every;
  if (c.recompute == Recompute::selective && c.recompute_modules != RecomputeModules{})
    j["recompute_modules"] = recompute_module_list(c.recompute_modules);
  j["stack"] = stack_name(c.stack);
  if (c.cuda_graphs.any()) j["cuda_graphs"] = cuda_graph_scope_list(c.cuda_graphs);
  j["micro_batch"] = c.micro_batch;
  j["grad_accum"] = c.grad_accum;
  j["seq_len"] = c.seq_len;
  j["param_dtype"] = dtype_name(c.param_dtype);
  j["main_param_dtype"] = dtype_name(c.main_param_dtype);
  j["main_grad_dtype"] = dtype_name(c.main_grad_dtype);
  j["grad_reduce_dtype"] = dtype_name(c.grad_reduce_dtype);
  if (c.fp8.has_value()) j["fp8"] = *c.fp8;
  j["fp8_param_gather"] = c.fp8_param_gather;
  if (fp8_compute(c)) j["fp8_recipe"] = fp8_recipe_name(c.fp8_recipe);
  j["fine_grained_param_gather"] = c.fine_grained_param_gather;
  j["keep_fp8_transpose_cache"] = c.keep_fp8_transpose_cache;
  j["double_buffer"] = c.double_buffer;
  j["allocator"] = allocator_name(c.allocator);
  j["optimizer"] = optimizer_name(c.optimizer);
  if (c.offload_activations > 0) j["offload_activations"] = c.offload_activations;
  if (c.stack != Stack::megatron_te) j["sdpa_backend"] = sdpa_backend_name(c.sdpa_backend);
  if (c.stack == Stack::torch_eager) j["fused_rms_norm"] = c.fused_rms_norm;
  if (c.no_sync) j["no_sync"] = true;
  if (c.stack != Stack::megatron_te) j["loss_kernel"] = loss_kernel_name(c.loss_kernel);
  return j;
}

void apply_overrides(nlohmann::json& config, const std::vector<std::string>& assignments) {
  if (config.is_null()) config = nlohmann::json::object();
  // Found by the config fuzz target: a config that is a number or a list reached
  // operator[] with a string key (nlohmann's type_error 305, an internal error).
  if (!config.is_object() && !assignments.empty())
    throw InputError("--set", "", "the config the flags apply to is not a JSON object");
  for (const std::string& assignment : assignments) {
    const auto equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw InputError("--set", assignment, "expected key=value");
    }
    const std::string key = assignment.substr(0, equals);
    const std::string text = assignment.substr(equals + 1);
    const auto& keys = fsdp_config_keys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      throw InputError("--set", key, unknown_name_message("config key", key, keys));
    }
    nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      // A JSON string must be UTF-8: plans and configs that carry it are written as JSON.
      value = text;
      try {
        (void)value.dump();
      } catch (const nlohmann::json::type_error&) {
        throw InputError("--set", key, "the value is not valid UTF-8 text");
      }
    }
    config[key] = std::move(value);
  }
}

std::string fsdp_config_label(const std::string& file, const std::vector<std::string>& overrides) {
  std::string label = file.empty() ? "config" : file;
  if (!overrides.empty()) label += " (with flags)";
  return label;
}

FsdpConfig load_fsdp_config(const std::string& file, const std::vector<std::string>& overrides) {
  nlohmann::json json = file.empty() ? nlohmann::json::object() : read_json_file(file);
  if (!json.is_object()) throw InputError(file, "/", "expected a JSON object of config fields");
  apply_overrides(json, overrides);
  return fsdp_config_from_json(json, fsdp_config_label(file, overrides));
}

namespace {

// The rules expert parallelism puts on the model and the cluster (Megatron's
// initialize_model_parallel: ep × etp must divide the world; each rank holds whole experts).
void check_expert_parallel(const FsdpConfig& c, const ModelSpec& model, const ClusterSpec& cluster,
                           const std::string& label) {
  const int64_t etp = expert_tp(c);
  const bool set = c.ep > 1 || c.etp > 0 || c.moe_capacity_factor.has_value() ||
                   c.moe_dispatcher != MoeDispatcher::allgather ||
                   c.moe_imbalance != kDefaultMoeImbalance;
  const TransformerArch* a = model.arch.get();
  if (a == nullptr || a->num_experts == 0) {
    if (!set) return;
    const char* key = c.ep > 1                                  ? "/ep"
                      : c.etp > 0                               ? "/etp"
                      : c.moe_capacity_factor                   ? "/moe_capacity_factor"
                      : c.moe_imbalance != kDefaultMoeImbalance ? "/moe_imbalance"
                                                                : "/moe_dispatcher";
    throw InputError(
        label, key,
        fmt::format("{} has no experts: expert settings apply to moe models only", model.name));
  }
  const int64_t gpus = cluster.num_gpus;
  if (c.ep > a->num_experts || a->num_experts % c.ep != 0) {
    throw InputError(label, "/ep",
                     fmt::format("ep = {} does not divide {}'s {} experts (each rank holds "
                                 "num_experts / ep whole experts)",
                                 c.ep, model.name, a->num_experts));
  }
  if (c.ep * etp > gpus || gpus % (c.ep * etp) != 0) {
    throw InputError(label, c.ep > 1 ? "/ep" : "/etp",
                     fmt::format("ep × etp = {} × {} = {} does not divide the {} GPUs: the "
                                 "expert mesh tiles them as etp × ep × expert data parallel",
                                 c.ep, etp, c.ep * etp, gpus));
  }
  if (etp > cluster.gpus_per_node) {
    throw InputError(label, "/etp",
                     fmt::format("etp = {} spans more than one NVLink domain ({} GPUs per node "
                                 "on {}): expert tensor parallelism runs collectives inside "
                                 "every MoE layer; use etp ≤ {}",
                                 etp, cluster.gpus_per_node, cluster.name, cluster.gpus_per_node));
  }
  if (a->moe_ffn_hidden_size % etp != 0) {
    throw InputError(label, c.etp > 0 ? "/etp" : "/tp",
                     fmt::format("etp = {} does not divide {}'s moe_ffn_hidden_size {} (expert "
                                 "tensor parallelism splits each expert's columns evenly)",
                                 etp, model.name, a->moe_ffn_hidden_size));
  }
  if (c.tp > 1 && !sequence_parallel(c)) {
    throw InputError(label, "/sequence_parallel",
                     "Megatron's MoE layer refuses tensor parallelism without sequence "
                     "parallelism in training (moe_layer.py); set sequence_parallel: true");
  }
  // Every token picks k distinct experts, so no expert sees more than all the tokens. The
  // imbalance matters only where ranks hold different experts or a capacity drops tokens.
  const double most =
      static_cast<double>(a->num_experts) / static_cast<double>(a->experts_per_token);
  if ((c.ep > 1 || c.moe_capacity_factor) && c.moe_imbalance > most) {
    throw InputError(label, "/moe_imbalance",
                     fmt::format("{} exceeds num_experts / experts_per_token = {:.4g} for {}: the "
                                 "busiest expert cannot see more than every token",
                                 c.moe_imbalance, most, model.name));
  }
}

// The rules tensor and context parallelism put on the model and the cluster.
void check_model_parallel(const FsdpConfig& c, const ModelSpec& model, const ClusterSpec& cluster,
                          const std::string& label) {
  if (c.tp > cluster.gpus_per_node) {
    throw InputError(label, "/tp",
                     fmt::format("tp = {} spans more than one NVLink domain ({} GPUs per node on "
                                 "{}): tensor parallelism runs collectives inside every layer and "
                                 "needs NVLink; use tp ≤ {}",
                                 c.tp, cluster.gpus_per_node, cluster.name, cluster.gpus_per_node));
  }
  check_expert_parallel(c, model, cluster, label);
  if (c.tp == 1 && c.cp == 1) return;
  if (model.arch == nullptr) {
    throw InputError(label, c.tp > 1 ? "/tp" : "/cp",
                     fmt::format("{} is an explicit model: it names no heads, projections or "
                                 "vocabulary for tensor or context parallelism to split; use "
                                 "tp = cp = 1, or a transformer or moe model",
                                 model.name));
  }
  const TransformerArch& a = *model.arch;
  auto divides = [&](int64_t value, const char* what, int64_t by, const char* key,
                     const char* why) {
    if (value % by != 0) {
      throw InputError(label, std::string("/") + key,
                       fmt::format("{} = {} does not divide {}'s {} {} ({})", key, by, model.name,
                                   what, value, why));
    }
  };
  if (a.mla() && c.tp > 1) {
    throw InputError(label, "/tp",
                     fmt::format("{} uses multi-head latent attention, whose split over tensor-"
                                 "parallel ranks (which projections Megatron duplicates) is not "
                                 "modelled; use tp = 1 (DeepSeek trains it without TP) with ep "
                                 "and cp",
                                 model.name));
  }
  const char* tp_why = "tensor parallelism splits them evenly over the tp ranks";
  divides(a.num_heads, "num_heads", c.tp, "tp", tp_why);
  divides(a.num_kv_heads, "num_kv_heads", c.tp, "tp", tp_why);
  if (a.ffn_hidden_size > 0) divides(a.ffn_hidden_size, "ffn_hidden_size", c.tp, "tp", tp_why);
  // Routed experts split over etp (check_expert_parallel); shared experts over tp.
  if (a.num_shared_experts > 0)
    divides(a.num_shared_experts * a.moe_ffn_hidden_size, "shared experts' width", c.tp, "tp",
            tp_why);
  if (c.cp > 1 && c.cp_comm == CpComm::a2a) {
    const char* why =
        "a2a (Ulysses) trades the sequence split for a split of each tensor-parallel "
        "rank's heads over the cp ranks";
    divides(a.num_heads / c.tp, "heads per tp rank", c.cp, "cp", why);
    divides(a.num_kv_heads / c.tp, "KV heads per tp rank", c.cp, "cp", why);
  }
}

}  // namespace

FsdpConfig tile_mesh(const FsdpConfig& config, const ClusterSpec& cluster,
                     const std::string& label) {
  FsdpConfig c = config;
  const int64_t gpus = cluster.num_gpus;
  const std::string where = fmt::format(
      "{} on {}", cluster.nodes() == 1 ? "1 node" : fmt::format("{} nodes", cluster.nodes()),
      cluster.name);
  // Each factor is at most kMaxGpus (2^20), so the products below stay far from overflow
  // once each partial product is checked against the GPU count.
  const int64_t model_ranks = c.tp * c.cp;
  if (model_ranks > gpus || gpus % model_ranks != 0) {
    throw InputError(label, c.cp > 1 ? "/cp" : "/tp",
                     fmt::format("tp × cp = {} × {} = {} does not divide the {} GPUs ({})", c.tp,
                                 c.cp, model_ranks, gpus, where));
  }
  if (c.dp_shard == 0) {
    if ((gpus / model_ranks) % c.dp_outer != 0) {
      throw InputError(label, "/dp_outer",
                       fmt::format("{} GPUs cannot be split into dp_outer = {} groups of tp × cp = "
                                   "{} × {} ranks",
                                   gpus, c.dp_outer, c.tp, c.cp));
    }
    c.dp_shard = gpus / model_ranks / c.dp_outer;
  }
  if (c.dp_shard * c.dp_outer * model_ranks != gpus) {
    throw InputError(label, "/dp_shard",
                     fmt::format("dp_outer × dp_shard × cp × tp = {} × {} × {} × {} = {} must "
                                 "equal the GPU count {} ({})",
                                 c.dp_outer, c.dp_shard, c.cp, c.tp,
                                 c.dp_outer * c.dp_shard * model_ranks, gpus, where));
  }
  return c;
}

namespace {

// What Megatron refuses of --recompute-modules (transformer_config.py at d98e8a6,
// docs/research/recompute_modules.md), under selective recompute, where it applies.
void check_recompute_modules(const FsdpConfig& c, const ModelSpec& model,
                             const std::string& label) {
  const RecomputeModules m = c.recompute_modules;
  if (c.recompute != Recompute::selective || m == RecomputeModules{}) return;
  const std::string where = "/recompute_modules";
  if (c.stack != Stack::megatron_te) {
    throw InputError(label, where,
                     fmt::format("is Megatron-Core's option; the {} stack re-runs what recompute "
                                 "selective, sac_op or sac_layer says",
                                 stack_name(c.stack)));
  }
  if (m.has(RecomputeModule::mla_up_proj) && (model.arch == nullptr || !model.arch->mla())) {
    throw InputError(label, where,
                     fmt::format("mla_up_proj needs multi-latent attention, which {} does not have "
                                 "(Megatron asserts the same)",
                                 model.name));
  }
  // Megatron refuses layernorm and moe_act under FP8 delayed scaling, but shardplan's
  // "delayed" recipe stands for every per-tensor recipe (tensorwise current scaling too):
  // --from-megatron refuses what Megatron refuses.
}

// What Megatron refuses of its CUDA graph settings (transformer_config.py __post_init__ at
// d98e8a6), and what shardplan does not model.
void check_cuda_graphs(const FsdpConfig& c, const ModelSpec& model, const std::string& label) {
  const CudaGraphScopes g = c.cuda_graphs;
  if (!g.any()) return;
  const std::string where = "/cuda_graphs";
  auto refuse = [&](const std::string& why) { throw InputError(label, where, why); };
  if (c.stack != Stack::megatron_te) {
    refuse(
        fmt::format("captures what Megatron's --cuda-graph-impl does; the {} stack's CUDA "
                    "graphs (torch.compile's reduce-overhead, torchtitan's graph trainer) are "
                    "not modelled",
                    stack_name(c.stack)));
  }
  const std::vector<std::string> list = cuda_graph_scope_list(g);
  const bool whole = g.has(CudaGraphScope::layer) || g.has(CudaGraphScope::full_iteration);
  if (whole && list.size() > 1) {
    refuse(
        fmt::format("layer and full_iteration stand alone (the whole layer, the whole step), "
                    "got {}",
                    fmt::join(list, ", ")));
  }
  if (g.has(CudaGraphScope::full_iteration)) return;
  if (g.has(CudaGraphScope::moe) && g.has(CudaGraphScope::moe_router))
    refuse("must not contain both moe and moe_router (Megatron asserts it)");
  if (g.has(CudaGraphScope::moe_preprocess) && !g.has(CudaGraphScope::moe_router))
    refuse("moe_preprocess is captured only with moe_router (Megatron asserts it)");
  const TransformerArch* a = model.arch.get();
  const bool moe_model = a != nullptr && a->num_experts > 1;
  if (!moe_model && (g.has(CudaGraphScope::moe) || g.has(CudaGraphScope::moe_router))) {
    refuse(fmt::format("moe and moe_router capture MoE layers; {} has none", model.name));
  }
  const bool dense_layer =
      a == nullptr || !moe_model ||
      std::find(a->moe_layers.begin(), a->moe_layers.end(), false) != a->moe_layers.end();
  if (g.has(CudaGraphScope::mlp) && !dense_layer)
    refuse(fmt::format("mlp captures dense MLPs; every layer of {} is MoE", model.name));
  if (g.has(CudaGraphScope::moe) && !c.moe_capacity_factor) {
    refuse(
        "moe is captured only for drop-and-pad MoE (Megatron asserts it): set "
        "moe_capacity_factor");
  }
  // (Megatron also refuses moe_preprocess where a capacity factor drops without padding
  // under the alltoall dispatcher; shardplan's capacity factor is padded.)
  if (c.recompute == Recompute::selective && c.recompute_modules.has(RecomputeModule::moe) &&
      g.has(CudaGraphScope::moe_router)) {
    refuse(
        "moe recompute is not supported with the moe_router CUDA graph (Megatron asserts it "
        "for --cuda-graph-impl transformer_engine)");
  }
  if (c.offload_activations > 0)
    refuse("per-layer CUDA graphs do not run with activation offload (Megatron raises)");
  if (c.recompute == Recompute::full)
    refuse("full recompute runs only with full_iteration CUDA graphs (Megatron asserts it)");
}

}  // namespace

FsdpConfig resolve_fsdp_config(const FsdpConfig& config, const ModelSpec& model,
                               const ClusterSpec& cluster, const std::string& label) {
  FsdpConfig c = config;
  if (c.recompute == Recompute::sac_op && model.arch == nullptr) {
    throw InputError(
        label, "/recompute",
        fmt::format("sac_op counts the matmuls of each decoder layer; {} is an explicit "
                    "model without layers shardplan builds: use selective or full",
                    model.name));
  }
  c = tile_mesh(c, cluster, label);
  c.sequence_parallel = sequence_parallel(c);
  c.fp8 = fp8_compute(c);
  check_model_parallel(c, model, cluster, label);
  check_recompute_modules(c, model, label);
  check_cuda_graphs(c, model, label);
  // Megatron-FSDP gathers MXFP8 weights module by module inside a unit (seeds/004, PR
  // #4181); the planner issues one all-gather per parameter group and cannot plan it.
  if (c.fine_grained_param_gather) {
    throw InputError(label, "/fine_grained_param_gather",
                     "per-module all-gathers inside a unit (Megatron-FSDP PR #4181, MXFP8) are "
                     "not modelled: shardplan plans one all-gather per parameter group of a "
                     "unit; set it to false (with finer units, unit_modules, for a similar "
                     "memory trade-off)");
  }
  if (fp8_compute(c) && cluster.gpu.fp8_dense_flops <= 0) {
    throw InputError(label, c.fp8_param_gather ? "/fp8_param_gather" : "/fp8",
                     fmt::format("{} has no FP8 tensor cores", cluster.gpu.name));
  }
  if (model.max_seq_len > 0 && c.seq_len > model.max_seq_len) {
    throw InputError(label, "/seq_len",
                     fmt::format("{} exceeds the {} positions {} was built with", c.seq_len,
                                 model.max_seq_len, model.name));
  }
  // The plan grows with units × micro-batches; refuse up front what would not fit in memory.
  const auto units = static_cast<int64_t>(find_fsdp_units(model, c.unit_modules, label).size());
  if (c.offload_activations > 0 && cluster.host_link.measured_bandwidth_bytes_per_s <= 0) {
    throw InputError(label, "/offload_activations",
                     fmt::format("{} has no host_link (the GPU's measured bandwidth to host "
                                 "memory) for the copies: add one to the cluster file",
                                 cluster.name));
  }
  // Transformer Engine offloads groups while later ones compute: at least one layer stays
  // (num_offload_layers + 1 <= layers; Megatron takes 0 to num_layers - 1).
  if (c.offload_activations > 0 && c.offload_activations >= units - 1) {
    throw InputError(
        label, "/offload_activations",
        fmt::format("{} of {} layer units: offload at most {} (one layer's forward "
                    "hides the last offloaded layer's copy)",
                    c.offload_activations, units - 1, std::max<int64_t>(units - 2, 0)));
  }
  if (c.grad_accum > limits::kMaxUnitMicroBatches / std::max<int64_t>(units, 1)) {
    throw InputError(
        label, "/grad_accum",
        fmt::format("{} micro-batches of {} FSDP units would make a plan of {} unit passes, "
                    "more than the {} shardplan plans at once (about 2 GB); simulate fewer "
                    "micro-batches and scale: the step time grows about linearly with them",
                    c.grad_accum, units, c.grad_accum * units, limits::kMaxUnitMicroBatches));
  }
  return c;
}

}  // namespace shardplan
