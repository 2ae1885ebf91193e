// A resolved job as torchtitan's job TOML (v0.2.x schema, job_config.py @238fa99): only
// keys torchtitan knows (it rejects the rest), what it cannot express as comments.
#include <fmt/format.h>

#include "interop/internal/emit.h"
#include "interop/internal/torchtitan.h"
#include "models/error.h"
#include "models/module_cost.h"
#include "models/transformer_builder.h"

namespace shardplan {
namespace {

std::string quoted(std::string_view text) {
  return fmt::format("\"{}\"", text);
}

void parallelism(const ModelSpec& model, const FsdpConfig& c, std::string& out) {
  out += "\n[parallelism]\n";
  if (c.sharding_strategy == ShardingStrategy::no_shard && c.cp > 1) {
    out +=
        "# no_shard with cp > 1: torchtitan shards over the cp ranks whenever cp > 1 "
        "(this runs ZeRO-3)\n";
  }
  if (c.sharding_strategy == ShardingStrategy::no_shard && c.cp == 1) {
    out += fmt::format("data_parallel_replicate_degree = {}\ndata_parallel_shard_degree = 1\n",
                       c.dp_shard * c.dp_outer);
  } else {
    out += fmt::format("data_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n",
                       c.dp_outer, c.dp_shard);
    if (c.sharding_strategy == ShardingStrategy::optim_grads) {
      out += "fsdp_reshard_after_forward = \"never\"  # keep gathered weights to the backward\n";
    } else if (c.sharding_strategy == ShardingStrategy::optim) {
      out += "# sharding optim (ZeRO-1): FSDP2 has none; this runs ZeRO-3\n";
    }
    if (c.dp_outer > 1 && c.outer_strategy == OuterStrategy::optim) {
      out += "# outer_strategy optim: FSDP2's HSDP replicates the optimizer over replicas\n";
    }
  }
  out += fmt::format("tensor_parallel_degree = {}\n", c.tp);
  if (c.tp > 1 && !sequence_parallel(c))
    out += "# sequence_parallel off: torchtitan's TP always runs it\n";
  if (c.tp_comm_overlap) out += "enable_async_tensor_parallel = true\n";
  if (!c.vocab_parallel_loss) out += "disable_loss_parallel = true\n";
  if (!c.vocab_parallel_embedding)
    out += "# a replicated embedding: torchtitan's is vocab-parallel\n";
  out += "pipeline_parallel_degree = 1\n";
  out += fmt::format("context_parallel_degree = {}\n", c.cp);
  if (c.cp > 1) {
    out += fmt::format("context_parallel_rotate_method = {}\n",
                       quoted(c.cp_comm == CpComm::a2a ? "alltoall" : "allgather"));
    if (c.cp_comm == CpComm::p2p)
      out += "# cp_comm p2p: torchtitan rotates by all-gather or all-to-all\n";
  }
  if (model.arch != nullptr && model.arch->num_experts > 0 && c.ep > 1) {
    out += fmt::format("expert_parallel_degree = {}\nexpert_tensor_parallel_degree = {}\n", c.ep,
                       c.etp > 0 ? c.etp : 1);
    if (c.moe_dispatcher == MoeDispatcher::deepep) {
      out += "expert_parallel_comm_backend = \"deepep\"\n";
    } else if (c.moe_dispatcher != MoeDispatcher::alltoall) {
      out += fmt::format("# moe_dispatcher {}: torchtitan dispatches by all-to-all or DeepEP\n",
                         c.moe_dispatcher == MoeDispatcher::allgather ? "allgather" : "hybridep");
    }
  }
}

void training(const FsdpConfig& c, std::string& out) {
  out += "\n[training]\n";
  out += fmt::format("local_batch_size = {}\n", c.micro_batch);
  const int64_t batch_ranks = c.dp_shard * c.dp_outer;
  out += fmt::format("global_batch_size = {}  # {} micro-batch(es) per step\n",
                     c.micro_batch * c.grad_accum * batch_ranks, c.grad_accum);
  out += fmt::format("seq_len = {}\n", c.seq_len);
  if (c.main_param_dtype == DType::bf16) out += "dtype = \"bfloat16\"\n";
  if (c.param_dtype == DType::fp32) out += "mixed_precision_param = \"float32\"\n";
  if (c.grad_reduce_dtype != c.main_param_dtype && c.grad_reduce_dtype != DType::fp32) {
    out += fmt::format("# grad_reduce_dtype {}: torchtitan reduces in float32\n",
                       dtype_name(c.grad_reduce_dtype));
  }
  if (c.offload_activations > 0) out += "# offload_activations: no torchtitan setting\n";
}

void checkpointing(const FsdpConfig& c, std::string& out) {
  out += "\n[activation_checkpoint]\n";
  switch (c.recompute) {
    case Recompute::none:
      out += "mode = \"none\"\n";
      break;
    case Recompute::full:
      out += "mode = \"full\"\n";
      break;
    case Recompute::sac_op:
      out += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      break;
    case Recompute::sac_layer:
      out += fmt::format("mode = \"selective\"\nselective_ac_option = \"{}\"\n", c.recompute_every);
      break;
    case Recompute::selective:
      out +=
          "mode = \"selective\"\nselective_ac_option = \"op\"  # Megatron's selective "
          "(attention only) has no torchtitan equal; the per-op policy is nearest\n";
      break;
  }
}

void compile_and_float8(const FsdpConfig& c, std::string& out) {
  out += "\n[compile]\n";
  if (c.stack == Stack::torch_compile) {
    out += c.loss_kernel == LossKernel::upcast
               ? "enable = true\ncomponents = [\"model\"]\n"
               : "enable = true\ncomponents = [\"model\", \"loss\"]\n";
  } else {
    out += c.loss_kernel == LossKernel::compiled ? "enable = true\ncomponents = [\"loss\"]\n"
                                                 : "enable = false\n";
  }
  if (!fp8_compute(c)) return;
  if (c.fp8_recipe == Fp8Recipe::mxfp8) return;  // the converter in [model] says it all
  out += fmt::format(
      "\n[quantize.linear.float8]\nenable_fsdp_float8_all_gather = {0}\n"
      "precompute_float8_dynamic_scale_for_fsdp = {0}\nfilter_fqns = [\"output\"]\n",
      c.fp8_param_gather ? "true" : "false");
}

std::string unexpressed(const FsdpConfig& c) {
  std::vector<std::string> notes;
  if (c.stack == Stack::megatron_te) {
    notes.push_back(
        "planned on stack megatron-te; torchtitan runs PyTorch (simulate with --set "
        "stack=torch-eager or torch-compile to compare)");
  }
  if (c.allocator != Allocator::expandable) {
    notes.push_back(
        fmt::format("allocator {}: torchtitan's run_train.sh sets "
                    "expandable_segments:True",
                    allocator_name(c.allocator)));
  }
  if (c.double_buffer) notes.push_back("double_buffer: Megatron-FSDP's; no FSDP2 setting");
  if (c.fine_grained_param_gather) notes.push_back("fine_grained_param_gather: no FSDP2 setting");
  if (c.forward_prefetch != 1 || c.backward_prefetch != 1) {
    notes.push_back(
        fmt::format("prefetch {}/{}: FSDP2 prefetches one module ahead; deeper "
                    "needs set_modules_to_forward_prefetch in code",
                    c.forward_prefetch, c.backward_prefetch));
  }
  if (!c.async_reduce)
    notes.push_back("async_reduce false: FSDP2 always reduces on its own stream");
  if (c.bucket_bytes) notes.push_back("bucket_bytes: FSDP2 gathers whole modules");
  if (c.no_sync) notes.push_back("no_sync: torchtitan reduces every micro-batch");
  if (c.moe_capacity_factor) notes.push_back("moe_capacity_factor: torchtitan's MoE is dropless");
  if (c.moe_imbalance != kDefaultMoeImbalance) {
    notes.push_back(
        fmt::format("moe_imbalance {:g}: the router's load, not a setting", c.moe_imbalance));
  }
  std::string out;
  for (const std::string& note : notes) out += "# " + note + "\n";
  return out;
}

}  // namespace

std::string emit_torchtitan(const ModelSpec& model, const ClusterSpec& cluster, const FsdpConfig& c,
                            const std::string& header) {
  const auto flavour = torchtitan_flavour_of(model.name);
  if (!flavour) {
    throw InputError("--emit torchtitan", "model",
                     fmt::format("model '{}' is not one of torchtitan's flavours ({})", model.name,
                                 torchtitan_flavour_list()));
  }
  std::string out = header;
  out += fmt::format(
      "# torchtitan v0.2.x job config; run: NGPU={} CONFIG_FILE=this.toml ./run_train.sh\n",
      cluster.num_gpus);
  out += unexpressed(c);
  out += fmt::format("\n[model]\nname = {}\nflavor = {}\n", quoted(flavour->name),
                     quoted(flavour->flavor));
  if (fp8_compute(c)) {
    out += c.fp8_recipe == Fp8Recipe::mxfp8 ? "converters = [\"quantize.linear.mx\"]\n"
                                            : "converters = [\"quantize.linear.float8\"]\n";
  }
  if (c.optimizer == Optimizer::sgd) out += "# optimizer sgd: set [optimizer] name for your run\n";
  parallelism(model, c, out);
  training(c, out);
  checkpointing(c, out);
  compile_and_float8(c, out);
  return out;
}

}  // namespace shardplan
