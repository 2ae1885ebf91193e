#include "models/transformer_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "models/error.h"
#include "models/integer_math.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

Footprint elements(double n) {
  return Footprint{.elements = n, .fixed_bytes = 0};
}
Footprint fixed(double bytes) {
  return Footprint{.elements = 0, .fixed_bytes = bytes};
}
Footprint elements_and_fixed(double n, double bytes) {
  return Footprint{.elements = n, .fixed_bytes = bytes};
}

Parameter param(std::string name, std::vector<int64_t> shape, DType dtype) {
  return Parameter{.name = std::move(name), .shape = std::move(shape), .dtype = dtype};
}

std::string join(const std::string& prefix, const std::string& local) {
  return prefix.empty() ? local : prefix + "." + local;
}

// How tensor parallelism splits a Linear (Megatron's ColumnParallelLinear and
// RowParallelLinear): column splits the outputs (and the bias), row the inputs (the bias
// is added after the reduction, so it stays whole); none keeps it whole on every rank,
// where it runs on the sequence-parallel shard of the tokens (the MoE router).
enum class Split { none, column, row };

// Divisors for one rank of the mesh: `t` splits the work inside a tensor-parallel region
// (heads, FFN columns, vocabulary), `seq` what lies in the sequence-parallel region
// (norms, residual dropout, the inputs column-parallel layers keep for backward): t with
// sequence parallelism, 1 without (Korthikanti et al. 2022, §4.2).
struct Ranks : ModelParallel {
  double t = 1;
  double seq = 1;
};

Ranks ranks_of(const ModelParallel& p) {
  Ranks r;
  static_cast<ModelParallel&>(r) = p;
  r.t = static_cast<double>(p.tp);
  r.seq = p.sequence_parallel ? r.t : 1.0;
  return r;
}

Footprint scaled(Footprint f, double divisor) {
  f.elements /= divisor;
  f.fixed_bytes /= divisor;
  return f;
}

void add_drop(Module& m, RecomputeModule which, Footprint dropped, bool reruns,
              double rerun_io_elements = 0) {
  m.cost.recompute_drops.push_back({.module = which,
                                    .dropped = dropped,
                                    .reruns = reruns,
                                    .rerun_io_elements_per_token = rerun_io_elements,
                                    .drops_fp8_copy = m.cost.fp8_own_copy_per_token.elements > 0});
}

// A normal checkpoint around `m` (Megatron's mlp, moe and shared_experts recompute
// modules: tensor_parallel.checkpoint keeps the module's input and re-runs its whole
// forward, collectives included): every module of the subtree stops saving what it saves,
// but `kept` of the one named `keep_in` (a residual dropout mask, which the layer's
// bias-dropout-add outside the module keeps).
void checkpoint_whole(Module& m, RecomputeModule which, const std::string& keep_in = "",
                      Footprint kept = {}) {
  Footprint dropped = m.cost.saved_per_token;
  if (m.name == keep_in) {
    dropped.elements -= kept.elements;
    dropped.fixed_bytes -= kept.fixed_bytes;
  }
  add_drop(m, which, dropped, true);
  for (Module& child : m.children) checkpoint_whole(child, which, keep_in, kept);
}

// A Linear y = x·Wᵀ (+ b): 2·in·out FLOPs per token; it saves its input for the weight
// gradient unless a sibling already saved the same tensor (`saves_input` false). Under
// tensor parallelism a column-parallel layer keeps its input as the sequence-parallel
// shard (re-gathered in backward), a row-parallel one its input split by t; extra saved
// bytes (the residual dropout mask after a row-parallel layer) lie in the sequence region.
Module linear(const std::string& name, int64_t in, int64_t out, bool bias, DType dtype,
              bool saves_input, Footprint extra_saved = {}, Split split = Split::none,
              const Ranks& r = {}) {
  const auto t = r.tp;
  const int64_t local_out = split == Split::column ? out / t : out;
  const int64_t local_in = split == Split::row ? in / t : in;
  const double in_kept = split == Split::row ? d(local_in) : d(in) / r.seq;
  Module m{.name = name, .type = "Linear"};
  m.parameters.push_back(param("weight", {local_out, local_in}, dtype));
  if (bias) m.parameters.push_back(param("bias", {local_out}, dtype));
  m.cost.kind = ComputeKind::gemm;
  const double token_share = split == Split::none ? 1.0 / r.seq : 1.0;
  m.cost.fwd_flops_per_token = 2.0 * d(local_in) * d(local_out) * token_share;
  m.cost.fwd_io_elements_per_token = (d(local_in) + d(local_out)) * token_share;
  m.cost.saved_per_token = saves_input ? elements(in_kept) : Footprint{};
  m.cost.saved_gemm_input_per_token = m.cost.saved_per_token;
  m.cost.saved_per_token += scaled(extra_saved, r.seq);
  m.cost.input_per_token = elements(in_kept);
  // A row-parallel output is the partial sum over every token, before its reduction; its
  // gradient arrives as the sequence-parallel shard (gathered for the GEMM).
  m.cost.output_per_token = elements(d(local_out) * token_share);
  m.cost.grad_output_per_token =
      split == Split::row ? elements(d(out) / r.seq) : m.cost.output_per_token;
  return m;
}

// Under FP8 Megatron has the attention output projection save its bf16 input, the output
// core attention saves anyway, rather than a quantized copy of it (attention.py:430-444 at
// d98e8a6: set_save_original_input(linear_proj) for recipes other than delayed, TE >= 2.6).
void keep_bf16_input(Module& o_proj) {
  o_proj.cost.saved_gemm_input_per_token = {};
}

ModuleComm comm(CommPhase phase, CommKind kind, MeshAxis axis, Footprint per_token,
                int64_t count = 1) {
  return ModuleComm{
      .phase = phase, .kind = kind, .axis = axis, .per_token = per_token, .count = count};
}

ModuleComm gemm_input_gather(CommPhase phase, Footprint per_token) {
  ModuleComm c = comm(phase, CommKind::all_gather, MeshAxis::tp, per_token);
  c.fp8_gemm_input = true;
  return c;
}

// The tensor-parallel collectives of a block that enters with a column-parallel layer and
// leaves with a row-parallel one (attention, MLP), on `width`-element activations.
// Sequence parallel: the input is all-gathered before the column layer and the output
// reduce-scattered after the row layer; backward all-gathers the output gradient,
// re-gathers the saved input shard for the weight gradient and reduce-scatters the input
// gradient (Megatron's LinearWithGradAccumulationAndAsyncCommunication). Without it: one
// all-reduce of the output forward, of the input gradient backward.
std::vector<ModuleComm> block_comms(const Ranks& r, int64_t width) {
  if (r.tp == 1) return {};
  const Footprint h = elements(d(width));
  if (!r.sequence_parallel) {
    return {comm(CommPhase::forward, CommKind::all_reduce, MeshAxis::tp, h),
            comm(CommPhase::backward, CommKind::all_reduce, MeshAxis::tp, h)};
  }
  return {gemm_input_gather(CommPhase::forward, h),
          comm(CommPhase::forward, CommKind::reduce_scatter, MeshAxis::tp, h),
          gemm_input_gather(CommPhase::backward, h), gemm_input_gather(CommPhase::backward, h),
          comm(CommPhase::backward, CommKind::reduce_scatter, MeshAxis::tp, h)};
}

// RMSNorm saves its input and the fp32 reciprocal RMS per token; LayerNorm also the mean.
// `width` elements per token, on 1 / `divisor` of the tokens; `residual`: the residual
// add before it is its own kernel on the eager stack.
Module norm_of(const std::string& name, int64_t width, NormKind kind, bool bias, bool residual,
               double divisor, DType dtype) {
  const bool layernorm = kind == NormKind::layernorm;
  Module m{.name = name, .type = layernorm ? "LayerNorm" : "RMSNorm"};
  m.parameters.push_back(param("weight", {width}, dtype));
  if (layernorm && bias) m.parameters.push_back(param("bias", {width}, dtype));
  m.cost.kind = ComputeKind::elementwise;
  m.cost.fwd_io_elements_per_token = 2.0 * d(width) / divisor;
  m.cost.saved_per_token = scaled(elements_and_fixed(d(width), layernorm ? 8.0 : 4.0), divisor);
  // Eager PyTorch runs RMSNorm (aten's composite rms_norm, torchtitan's RMSNorm) as
  // separate kernels on an fp32 copy: to(float) (read 2, write 4 bytes per element), pow
  // (4, 4), mean (4), x·rsqrt (4, 4), type_as (4, 2), ·weight (2, 2) = 36 bytes where a
  // fused norm moves 4: 16 more bf16 elements per hidden element. LayerNorm has aten's own
  // fused kernel (native_layer_norm) in eager too. The residual add before either is its
  // own kernel (read 2 × 2, write 2 bytes), which fused stacks fold into the norm: 3 more.
  // PyTorch then fused F.rms_norm into one kernel (pytorch/pytorch#153666, May 2025; one forward
  // and two backward kernels in 2.11, tests/data/h200/sdpa_probe.json): then only the 3.
  const double composite = layernorm ? 0.0 : 16.0;
  m.cost.eager_extra_io_elements_per_token =
      (composite + (residual ? 3.0 : 0.0)) * d(width) / divisor;
  m.cost.eager_composite_norm_io_elements_per_token = composite * d(width) / divisor;
  m.cost.input_per_token = elements(d(width) / divisor);
  return m;
}

// A layer's norms are replicated on every tensor-parallel rank and run on the
// sequence-parallel shard of the tokens, after a residual add.
Module norm(const std::string& name, const TransformerArch& a, const Ranks& r) {
  return norm_of(name, a.hidden_size, a.norm, a.bias, true, r.seq, a.dtype);
}

// An RMSNorm inside a block, over `width` elements of every token of the full sequence,
// with no residual add (MLA's latent norms: after the down projections, before the up
// projections).
Module latent_norm(const std::string& name, int64_t width, const TransformerArch& a) {
  return norm_of(name, width, NormKind::rmsnorm, false, false, 1.0, a.dtype);
}

int64_t q_dim(const TransformerArch& a) {
  return a.num_heads * a.head_dim;
}
int64_t kv_dim(const TransformerArch& a) {
  return a.num_kv_heads * a.head_dim;
}

// Context parallelism's exchange of keys and values around one attention (Transformer
// Engine's context_parallel.py), per token of this rank; `kv` is the K and V width on this
// tensor-parallel rank. p2p: cp − 1 ring steps, each sending the K/V chunk held (backward:
// K/V and the dK/dV accumulated so far); all_gather: K and V gathered from all cp ranks
// (backward: gathered again, dK/dV reduce-scattered); a2a (Ulysses): Q, K, V all-to-all
// into a head split before attention and the output back after, mirrored in backward.
std::vector<ModuleComm> cp_comms(const Ranks& r, double q, double kv) {
  if (r.cp == 1) return {};
  const auto cp = static_cast<double>(r.cp);
  switch (r.cp_comm) {
    case CpComm::p2p:
      return {
          comm(CommPhase::forward, CommKind::send_recv, MeshAxis::cp, elements(2.0 * kv), r.cp - 1),
          comm(CommPhase::backward, CommKind::send_recv, MeshAxis::cp, elements(4.0 * kv),
               r.cp - 1)};
    case CpComm::all_gather:
      return {
          comm(CommPhase::forward, CommKind::all_gather, MeshAxis::cp, elements(2.0 * kv * cp)),
          comm(CommPhase::backward, CommKind::all_gather, MeshAxis::cp, elements(2.0 * kv * cp)),
          comm(CommPhase::backward, CommKind::reduce_scatter, MeshAxis::cp,
               elements(2.0 * kv * cp))};
    case CpComm::a2a:
      return {
          comm(CommPhase::forward, CommKind::all_to_all, MeshAxis::cp, elements(q + 2.0 * kv)),
          comm(CommPhase::forward, CommKind::all_to_all, MeshAxis::cp, elements(q)),
          comm(CommPhase::backward, CommKind::all_to_all, MeshAxis::cp, elements(q)),
          comm(CommPhase::backward, CommKind::all_to_all, MeshAxis::cp, elements(q + 2.0 * kv))};
  }
  return {};
}

// Tensor parallelism splits the heads: q, k and v are column-parallel, o_proj row-parallel.
Module attention(const std::string& name, const TransformerArch& a, const Ranks& r) {
  const int64_t h = a.hidden_size;
  const int64_t q = q_dim(a);
  const int64_t kv = kv_dim(a);
  const double local_q = d(q) / r.t;
  const double local_kv = d(kv) / r.t;
  const double local_heads = d(a.num_heads) / r.t;
  const bool qkv_bias = a.bias || a.qkv_bias;
  Module m{.name = name, .type = "Attention"};
  // q, k and v read the same normed input; it is saved once, by q_proj.
  m.children.push_back(
      linear(join(name, "q_proj"), h, q, qkv_bias, a.dtype, true, {}, Split::column, r));
  m.children.push_back(
      linear(join(name, "k_proj"), h, kv, qkv_bias, a.dtype, false, {}, Split::column, r));
  m.children.push_back(
      linear(join(name, "v_proj"), h, kv, qkv_bias, a.dtype, false, {}, Split::column, r));

  Module core{.name = join(name, "core_attention"),
              .type = a.flash_attention ? "FlashAttention" : "CoreAttention"};
  core.cost.kind = ComputeKind::attention;
  // Scores Q·Kᵀ and values P·V: 2·s·q each per token, before the causal discount.
  core.cost.fwd_flops_per_token_ctx = 4.0 * local_q;
  core.cost.causal = a.causal;
  // Flash attention's backward recomputes the scores: 5 matmuls against 2 (REFERENCES).
  core.cost.bwd_flops_factor = a.flash_attention ? 2.5 : 2.0;
  core.cost.fwd_io_elements_per_token = local_q + 2.0 * local_kv + local_q;
  // Eager RoPE (torchtitan's apply_rotary_emb): q and k to fp32 (read 2, write 4 bytes),
  // a complex product (4, 4), type_as (4, 2) = 20 bytes per element where a fused RoPE
  // moves 4: 8 more bf16 elements for each of q and k.
  if (a.position_embedding == PositionEmbedding::rope)
    core.cost.eager_extra_io_elements_per_token = 8.0 * (local_q + local_kv);
  const Footprint qkv = elements(local_q + 2.0 * local_kv);
  core.cost.saved_per_token = qkv;
  if (a.flash_attention) {
    // Flash keeps only the output (saved by o_proj) and the fp32 log-sum-exp per head;
    // its dropout regenerates the mask from the RNG state.
    core.cost.saved_per_token += fixed(4.0 * local_heads);
  } else {
    // Softmax output per head and key (a·s per token); with dropout also the 1-byte mask
    // and the dropped-out probabilities: Korthikanti's 5·a·s²·b bytes.
    core.cost.saved_per_token_ctx =
        a.dropout ? elements_and_fixed(2.0 * local_heads, local_heads) : elements(local_heads);
  }
  core.cost.selective_recompute = true;
  core.cost.selective_kept_per_token = qkv;
  // sac_op saves SDPA's outputs: the attention output and the fp32 log-sum-exp per head.
  core.cost.sac_op_kept_per_token = elements_and_fixed(local_q, 4.0 * local_heads);
  core.cost.input_per_token = qkv;
  core.cost.comms = cp_comms(r, local_q, local_kv);
  m.children.push_back(std::move(core));

  // o_proj saves the attention output; the residual dropout after it keeps a mask.
  m.children.push_back(linear(join(name, "o_proj"), q, h, a.bias, a.dtype, true,
                              a.dropout ? fixed(d(h)) : Footprint{}, Split::row, r));
  keep_bf16_input(m.children.back());
  m.cost.input_per_token = elements(d(h) / r.seq);
  m.cost.comms = block_comms(r, h);
  return m;
}

// Multi-head latent attention (DeepSeek-V3, arXiv 2412.19437 §2.1.1; Hugging Face's
// DeepseekV3Attention): the normed input is projected down to a query latent
// (q_a_proj, q_lora_rank; or straight to the heads when it is 0) and to a key-value latent
// with a shared RoPE key (kv_a_proj_with_mqa, kv_lora_rank + qk_rope_head_dim); each latent
// is RMS-normed and projected up per head (q_b_proj to nope + rope query dims, kv_b_proj to
// nope key + value dims). Attention runs on (nope + rope)-wide queries and keys and
// v_head_dim-wide values; o_proj maps the heads back. Training runs it unabsorbed, as
// Megatron's MLASelfAttention and torchtitan do. Tensor parallelism is refused for it
// (resolve_fsdp_config): which projections Megatron duplicates over TP is not modelled.
Module mla_attention(const std::string& name, const TransformerArch& a, const Ranks& r) {
  const int64_t h = a.hidden_size;
  const int64_t heads = a.num_heads;
  const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t q_width = heads * qk;
  const int64_t v_width = heads * a.v_head_dim;
  Module m{.name = name, .type = "MLAttention"};
  if (a.q_lora_rank > 0) {
    m.children.push_back(
        linear(join(name, "q_a_proj"), h, a.q_lora_rank, false, a.dtype, true, {}, Split::none, r));
    m.children.push_back(latent_norm(join(name, "q_a_layernorm"), a.q_lora_rank, a));
    m.children.push_back(linear(join(name, "q_b_proj"), a.q_lora_rank, q_width, false, a.dtype,
                                true, {}, Split::column, r));
  } else {
    m.children.push_back(
        linear(join(name, "q_proj"), h, q_width, false, a.dtype, true, {}, Split::column, r));
  }
  // The key-value down projection reads the same normed input, saved once above (under
  // FP8 it keeps its own quantized copy: a TE Linear of its own).
  m.children.push_back(linear(join(name, "kv_a_proj_with_mqa"), h,
                              a.kv_lora_rank + a.qk_rope_head_dim, false, a.dtype, false, {},
                              Split::none, r));
  m.children.back().cost.fp8_own_copy_per_token = elements(d(h) / r.seq);
  m.children.push_back(latent_norm(join(name, "kv_a_layernorm"), a.kv_lora_rank, a));
  m.children.push_back(linear(join(name, "kv_b_proj"), a.kv_lora_rank,
                              heads * (a.qk_nope_head_dim + a.v_head_dim), false, a.dtype, true, {},
                              Split::column, r));
  Module core{.name = join(name, "core_attention"), .type = "FlashAttention"};
  core.cost.kind = ComputeKind::attention;
  // Scores over (nope + rope) dims, values over v_head_dim, per head and key.
  core.cost.fwd_flops_per_token_ctx = 2.0 * d(q_width) + 2.0 * d(v_width);
  core.cost.causal = a.causal;
  core.cost.bwd_flops_factor = 2.5;  // flash attention's backward recomputes the scores
  core.cost.fwd_io_elements_per_token = d(2 * q_width + 2 * v_width);
  // RoPE applied to the query and the shared key part in eager PyTorch (as attention()).
  core.cost.eager_extra_io_elements_per_token = 8.0 * d(heads + 1) * d(a.qk_rope_head_dim);
  const Footprint qkv = elements(d(2 * q_width + v_width));
  core.cost.saved_per_token = qkv;
  core.cost.saved_per_token += fixed(4.0 * d(heads));
  core.cost.selective_recompute = true;
  core.cost.selective_kept_per_token = qkv;
  core.cost.sac_op_kept_per_token = elements_and_fixed(d(v_width), 4.0 * d(heads));
  core.cost.input_per_token = qkv;
  // Ring attention exchanges keys and values: (nope + rope) + v_head_dim wide per head.
  core.cost.comms = cp_comms(r, d(q_width), d(q_width + v_width) / 2.0);
  m.children.push_back(std::move(core));
  m.children.push_back(
      linear(join(name, "o_proj"), v_width, h, false, a.dtype, true, {}, Split::row, r));
  keep_bf16_input(m.children.back());
  m.cost.input_per_token = elements(d(h) / r.seq);
  return m;
}

// The activation between the up and down projections: SwiGLU (fused, as Megatron and
// TransformerEngine run it) saves the gate and up outputs; GELU saves its input.
Module activation(const std::string& name, MlpKind kind, int64_t ffn) {
  Module m{.name = name, .type = kind == MlpKind::swiglu ? "SwiGLU" : "GELU"};
  // `ffn` is this tensor-parallel rank's share of the columns.
  m.cost.kind = ComputeKind::elementwise;
  const double saved = kind == MlpKind::swiglu ? 2.0 * d(ffn) : d(ffn);
  m.cost.fwd_io_elements_per_token = saved + d(ffn);
  m.cost.saved_per_token = elements(saved);
  m.cost.input_per_token = elements(saved);
  // Eager PyTorch runs silu(gate) * up as two ops: SiLU saves its input (the gate) and the
  // product saves both its operands, so SiLU's output is kept as well.
  if (kind == MlpKind::swiglu) m.cost.eager_extra_saved_per_token = elements(d(ffn));
  // ... and as two kernels it moves SiLU's output out and back in: 2 more elements.
  if (kind == MlpKind::swiglu) m.cost.eager_extra_io_elements_per_token = 2.0 * d(ffn);
  return m;
}

// A dense MLP: gate/up (fc1) column-parallel, down (fc2) row-parallel. `saves_input` is
// false when another module (the router) already saved the same normed input;
// `extra_down_saved` adds what the MoE combine keeps. `block` says whether the MLP is a
// tensor-parallel block of its own (a dense layer's) or an expert inside the MoE block,
// whose collectives the MoE module runs once for all experts. `checkpointed_by`: the
// Megatron recompute modules that checkpoint this MLP whole.
Module mlp(const std::string& name, const std::string& type, const TransformerArch& a, int64_t ffn,
           bool saves_input, Footprint extra_down_saved, const Ranks& r, bool block,
           const std::vector<RecomputeModule>& checkpointed_by = {}) {
  const int64_t h = a.hidden_size;
  Module m{.name = name, .type = type};
  Footprint down_extra = extra_down_saved;
  const Footprint mask = a.dropout ? fixed(d(h)) : Footprint{};
  down_extra += mask;
  if (a.mlp == MlpKind::swiglu) {
    m.children.push_back(linear(join(name, "gate_proj"), h, ffn, a.bias, a.dtype, saves_input, {},
                                Split::column, r));
    m.children.push_back(
        linear(join(name, "up_proj"), h, ffn, a.bias, a.dtype, false, {}, Split::column, r));
    m.children.push_back(activation(join(name, "act_fn"), a.mlp, ffn / r.tp));
    m.children.push_back(
        linear(join(name, "down_proj"), ffn, h, a.bias, a.dtype, true, down_extra, Split::row, r));
  } else {
    m.children.push_back(
        linear(join(name, "fc1"), h, ffn, a.bias, a.dtype, saves_input, {}, Split::column, r));
    m.children.push_back(activation(join(name, "act_fn"), a.mlp, ffn / r.tp));
    m.children.push_back(
        linear(join(name, "fc2"), ffn, h, a.bias, a.dtype, true, down_extra, Split::row, r));
  }
  m.cost.input_per_token = elements(d(h) / r.seq);
  if (block) m.cost.comms = block_comms(r, h);
  // Beside a router that saves the normed input in bf16, the first linear (a TE module of
  // its own) saves its quantized copy under FP8.
  if (!saves_input) m.children.front().cost.fp8_own_copy_per_token = elements(d(h) / r.seq);
  // The residual dropout's mask belongs to the layer's bias-dropout-add, outside the module.
  for (RecomputeModule which : checkpointed_by) {
    checkpoint_whole(m, which, m.children.back().name, scaled(mask, r.seq));
  }
  return m;
}

// The busiest expert-parallel rank's routed tokens ÷ the mean rank's. The busiest expert
// sees `moe_imbalance` × the mean (capped by the capacity factor, whose excess tokens are
// dropped); the others on its rank see the mean of the rest, (E − imbalance) ÷ (E − 1)
// (capped too). With every expert on one rank (ep 1) the rank sees exactly its own
// routed tokens, 1 without a cap. docs/model.md "Mixture of experts".
double moe_rank_load(const TransformerArch& a, const ModelParallel& p) {
  const double experts = d(a.num_experts);
  if (experts <= 1) return 1.0;
  const double cap = p.moe_capacity_factor > 0 ? p.moe_capacity_factor : experts;
  const double busiest = std::min(p.moe_imbalance, cap);
  const double rest = std::min((experts - p.moe_imbalance) / (experts - 1.0), cap);
  const double local = experts / d(p.ep);
  return (busiest + (local - 1.0) * rest) / local;
}

// The token dispatch and combine around the experts (Megatron's token_dispatcher.py), per
// token of this rank's micro-batch; `routed` is the share of them each rank's experts
// receive (top-k copies of its sequence-parallel shard, × the busiest rank's load).
// alltoall: each routed copy to its expert's rank over ep, then gathered over etp
// (gather_from_sequence_parallel_region); combine reduce-scatters over etp and sends the
// outputs back over ep; backward runs the same in reverse. allgather: the hidden states
// gathered over ep × etp before routing, the outputs reduce-scattered back; backward
// gathers the output gradient and reduce-scatters the input gradient. The all-to-alls are
// sized by the busiest rank's receive, which every rank waits for.
// deepep, hybridep: as alltoall (etp 1), but each token goes once to each rank that holds
// any of its k experts (DeepEP's get_dispatch_layout, is_token_in_rank) and is permuted
// there, so `copies` (distinct ranks per token ÷ k) of the routed copies cross.
std::vector<ModuleComm> dispatch_comms(const Ranks& r, int64_t h, double routed, double copies) {
  std::vector<ModuleComm> out;
  const double etp = d(r.etp);
  if (deduplicates_tokens(r.moe_dispatcher)) {
    if (r.ep == 1) return out;
    const Footprint sent = elements(d(h) * routed * copies);
    for (CommPhase phase : {CommPhase::forward, CommPhase::backward}) {
      out.push_back(comm(phase, CommKind::all_to_all, MeshAxis::ep, sent));
      out.push_back(comm(phase, CommKind::all_to_all, MeshAxis::ep, sent));
    }
    return out;
  }
  if (r.moe_dispatcher == MoeDispatcher::allgather) {
    if (r.ep * r.etp == 1) return out;
    const Footprint gathered = elements(d(h) * d(r.ep) * etp / r.seq);
    out = {comm(CommPhase::forward, CommKind::all_gather, MeshAxis::ep_etp, gathered),
           comm(CommPhase::forward, CommKind::reduce_scatter, MeshAxis::ep_etp, gathered),
           comm(CommPhase::backward, CommKind::all_gather, MeshAxis::ep_etp, gathered),
           comm(CommPhase::backward, CommKind::reduce_scatter, MeshAxis::ep_etp, gathered)};
    return out;
  }
  const Footprint sent = elements(d(h) * routed / etp);
  const Footprint gathered = elements(d(h) * routed);
  for (CommPhase phase : {CommPhase::forward, CommPhase::backward}) {
    if (r.ep > 1) out.push_back(comm(phase, CommKind::all_to_all, MeshAxis::ep, sent));
    if (r.etp > 1) {
      out.push_back(comm(phase, CommKind::all_gather, MeshAxis::etp, gathered));
      out.push_back(comm(phase, CommKind::reduce_scatter, MeshAxis::etp, gathered));
    }
    if (r.ep > 1) out.push_back(comm(phase, CommKind::all_to_all, MeshAxis::ep, sent));
  }
  return out;
}

// The expected number of ranks a token's k experts fall on, ÷ k: k of E experts drawn
// uniformly without repeats, E / ep on each of ep ranks; a rank is missed with probability
// C(E − E/ep, k) / C(E, k).
double distinct_rank_share(const TransformerArch& a, int64_t ep) {
  const double experts = d(a.num_experts);
  const double others = experts - experts / d(ep);
  double missed = 1.0;
  for (int64_t i = 0; i < a.experts_per_token; ++i) {
    missed *= std::max(others - d(i), 0.0) / (experts - d(i));
  }
  return d(ep) * (1.0 - missed) / d(a.experts_per_token);
}

// Mixture of experts: a router picks `experts_per_token` of `num_experts` per token on
// this rank's sequence-parallel shard. This rank holds num_experts / ep whole experts,
// each split over etp ranks as a dense MLP is over tp; they receive the routed copies of
// the tokens of the ep × etp ranks that share them, in the busiest rank's proportion
// (moe_rank_load). Each routed copy is saved by its expert's first linear (the permuted
// tokens), with its fp32 routing weight, which Megatron applies inside the expert's
// activation (its unpermute keeps only indices: token_dispatcher.py, moe_utils.py at
// Megatron-LM d98e8a6). Shared experts run as a dense MLP on the tensor-parallel group.
Module moe(const std::string& name, const TransformerArch& a, const Ranks& r) {
  const int64_t h = a.hidden_size;
  Module m{.name = name, .type = "MoE"};
  Module router = linear(join(name, "router"), h, a.num_experts, false, a.dtype, true,
                         fixed(4.0 * d(a.num_experts)), Split::none, r);
  router.type = "Router";
  // Megatron's router is a plain matmul in the router dtype, outside Transformer Engine's
  // FP8: its input stays saved in bf16.
  router.cost.saved_gemm_input_per_token = {};
  m.children.push_back(std::move(router));
  // Per token of the micro-batch: the routed copies this rank's experts run, together
  // (tensor parallelism comes with sequence parallelism here: resolve_fsdp_config).
  const double routed = d(a.experts_per_token) * d(r.etp) / r.seq * moe_rank_load(a, r);
  Ranks experts = r;
  experts.tp = r.etp;
  experts.t = d(r.etp);
  experts.sequence_parallel = false;
  experts.seq = 1;
  // The rank's experts as grouped GEMMs: one module whose weights stack them.
  const int64_t local_experts = a.num_experts / r.ep;
  Module grouped = mlp(join(name, "experts"), "Expert", a, a.moe_ffn_hidden_size, true, fixed(4.0),
                       experts, false, {RecomputeModule::moe});
  grouped.cost.token_fraction = routed;
  for (Module& child : grouped.children) {
    if (child.parameters.empty()) continue;
    child.stacked_experts = local_experts;
    for (Parameter& p : child.parameters) p.shape.insert(p.shape.begin(), local_experts);
  }
  m.children.push_back(std::move(grouped));
  if (a.num_shared_experts > 0) {
    m.children.push_back(mlp(join(name, "shared_experts"), "SharedExpert", a,
                             a.num_shared_experts * a.moe_ffn_hidden_size, false, {}, r, true,
                             {RecomputeModule::moe, RecomputeModule::shared_experts}));
  }
  // Megatron's moe recompute checkpoints the whole layer (router, dispatch, experts,
  // combine) and keeps its input, the normed hidden state the router saves.
  Module& router_module = m.children.front();
  add_drop(router_module, RecomputeModule::moe,
           fixed(router_module.cost.saved_per_token.fixed_bytes), true);
  add_drop(m, RecomputeModule::moe, {}, true);
  m.cost.input_per_token = elements(d(h) / r.seq);
  const double copies = deduplicates_tokens(r.moe_dispatcher) ? distinct_rank_share(a, r.ep) : 1.0;
  m.cost.comms = dispatch_comms(r, h, routed, copies);
  // Every Megatron dispatcher copies the tokens per expert to the host once per forward
  // (the all-to-all's split sizes, GroupedLinear's m_splits), except drop-and-pad, whose
  // sizes follow from the capacity (token_dispatcher.py at Megatron-LM d98e8a6). A capacity
  // factor is taken as padded: Megatron-Bridge's and NeMo's token-drop settings pad.
  m.cost.host_syncs = r.moe_capacity_factor > 0 ? 0 : 1;
  // torchtitan's per-op checkpointing saves the outputs of its communication ops
  // (all_to_all_single, reduce_scatter_tensor: "to avoid re-communication",
  // activation_checkpoint.py at 2026-08-21): the tokens received for dispatch and back
  // from combine, or the combine's scattered output.
  if (r.moe_dispatcher != MoeDispatcher::allgather && r.ep > 1) {
    m.cost.sac_op_kept_per_token = elements(2.0 * d(h) * routed * copies / d(r.etp));
  } else if (r.moe_dispatcher == MoeDispatcher::allgather && r.ep * r.etp > 1 &&
             !(r.tp > 1 && r.sequence_parallel)) {
    // (Under sequence parallelism the layer's own kept reduce-scatter outputs, mark_sac_op,
    // already count it.)
    m.cost.sac_op_kept_per_token = elements(d(h) / r.seq);
  }
  return m;
}

// torchtitan's per-op selective checkpointing of one layer (_apply_op_sac: the policy
// saves ops of _op_sac_save_list, "except every second mm", its counter restarting at
// each layer): the layer keeps its input (the checkpoint's), the matmuls numbered 1, 3,
// 5, ... in forward order keep their outputs, the others re-run in backward; attention
// keeps its outputs (core attention sets them); with sequence parallelism the two
// reduce-scatter outputs are saved too (reduce_scatter_tensor is on the list).
//
// In an MoE layer the router's matmul is recomputed by shape (force_recompute_mm_shapes_by_fqns
// "moe.router.gate", counted nowhere) and the routed experts' grouped GEMMs
// (aten._grouped_mm) are not on the save list at all: both re-run in backward, keeping
// nothing (torchtitan/distributed/activation_checkpoint.py at 2026-08-21).
void mark_sac_op(Module& layer, const Ranks& r) {
  int64_t matmuls = 0;
  std::function<void(Module&, bool)> visit = [&](Module& m, bool grouped) {
    grouped = grouped || m.type == "Expert";
    if (m.cost.kind == ComputeKind::gemm && !m.parameters.empty()) {
      if (grouped || m.type == "Router") {
        m.cost.sac_op_recompute = true;
      } else if (++matmuls % 2 == 1) {
        m.cost.sac_op_kept_per_token = m.cost.output_per_token;
      } else {
        m.cost.sac_op_recompute = true;
      }
    }
    for (Module& child : m.children) visit(child, grouped);
  };
  visit(layer, false);
  const double h = layer.cost.input_per_token.elements;
  layer.cost.sac_op_kept_per_token = elements(r.tp > 1 && r.sequence_parallel ? 3.0 * h : h);
}

// The Megatron recompute modules that act on a layer's norms and on what lies between its
// modules, as Megatron's TE layer spec builds it (gpt_layer_specs.py at d98e8a6;
// docs/research/recompute_modules.md): children input norm, attention, pre-MLP norm, MLP.
void mark_recompute_modules(Module& layer, const TransformerArch& a, bool is_moe) {
  Module& input_norm = layer.children[0];
  Module& attn = layer.children[1];
  Module& pre_mlp_norm = layer.children[2];
  Module& ffn = layer.children[3];
  auto stats = [](const Module& norm) { return fixed(norm.cost.saved_per_token.fixed_bytes); };
  auto saved_input = [](const Module& linear) {
    return elements(linear.cost.saved_per_token.elements);
  };
  auto child = [](Module& parent, const std::string& local) -> Module* {
    for (Module& c : parent.children) {
      if (c.name == join(parent.name, local)) return &c;
    }
    return nullptr;
  };
  // layernorm: only norms that are modules of their own. The spec fuses the input norm
  // into the QKV linear (and a dense layer's pre-MLP norm into fc1); MLA without
  // down-projection fusion and MoE layers keep them apart. The norm re-runs; what it
  // stops saving is its statistics and its output, which its consumer saved (MLA's
  // first down projection; the router).
  if (a.mla()) {
    add_drop(input_norm, RecomputeModule::layernorm, stats(input_norm), true);
    add_drop(attn.children.front(), RecomputeModule::layernorm, saved_input(attn.children.front()),
             false);
    // Megatron has both down projections save the original, which the discard frees.
    if (Module* kv_down = child(attn, "kv_a_proj_with_mqa"))
      add_drop(*kv_down, RecomputeModule::layernorm, {}, false);
  }
  if (is_moe) {
    add_drop(pre_mlp_norm, RecomputeModule::layernorm, stats(pre_mlp_norm), true);
    add_drop(ffn.children.front(), RecomputeModule::layernorm, saved_input(ffn.children.front()),
             false);
    // The shared experts' fc1 saves the original too (moe_layer.py:743-750) and loses it.
    if (Module* shared = child(ffn, "shared_experts"))
      add_drop(shared->children.front(), RecomputeModule::layernorm, {}, false);
    // moe_act: the experts' activation re-runs and fc2 stops saving its input (fc1's
    // output, which the activation keeps, stays; experts.py:1019-1030).
    Module& experts = ffn.children[1];
    for (Module& c : experts.children) {
      if (c.parameters.empty()) add_drop(c, RecomputeModule::moe_act, {}, true);
    }
    add_drop(experts.children.back(), RecomputeModule::moe_act,
             saved_input(experts.children.back()), false);
  } else {
    // mlp: the checkpoint's input is the residual, before the norm fused into fc1.
    add_drop(pre_mlp_norm, RecomputeModule::mlp, stats(pre_mlp_norm), true);
  }
  if (a.mla()) {
    // mla_up_proj: the up projections (with their latent norms, qk_layernorm) and RoPE
    // re-run; core attention's Q, K and V are not saved (multi_latent_attention.py:855-990).
    for (const char* norm_name : {"q_a_layernorm", "kv_a_layernorm"}) {
      if (Module* n = child(attn, norm_name)) {
        add_drop(*n, RecomputeModule::mla_up_proj, stats(*n), true);
      }
    }
    for (const char* up : {"q_b_proj", "kv_b_proj"}) {
      if (Module* p = child(attn, up)) {
        add_drop(*p, RecomputeModule::mla_up_proj, saved_input(*p), true);
      }
    }
    // Without a query latent q_proj is the query's up projection; its input (the normed
    // hidden state) stays, saved for the key-value down projection.
    if (Module* q = child(attn, "q_proj")) add_drop(*q, RecomputeModule::mla_up_proj, {}, true);
    if (Module* core = child(attn, "core_attention")) {
      const Footprint qkv = core->cost.selective_kept_per_token;
      // RoPE and the concatenations read and write Q, K and V again.
      add_drop(*core, RecomputeModule::mla_up_proj, qkv, false, 2.0 * qkv.elements);
    }
  }
}

Module decoder_layer(int64_t index, const TransformerArch& a, const Ranks& r) {
  const std::string name = fmt::format("layers.{}", index);
  const bool is_moe = a.num_experts > 0 && a.moe_layers[static_cast<std::size_t>(index)];
  Module layer{.name = name, .type = is_moe ? "MoEDecoderLayer" : "DecoderLayer"};
  layer.children.push_back(norm(join(name, "input_layernorm"), a, r));
  layer.children.push_back(a.mla() ? mla_attention(join(name, "self_attn"), a, r)
                                   : attention(join(name, "self_attn"), a, r));
  layer.children.push_back(norm(join(name, "post_attention_layernorm"), a, r));
  if (is_moe) {
    layer.children.push_back(moe(join(name, "mlp"), a, r));
  } else {
    layer.children.push_back(mlp(join(name, "mlp"), "MLP", a, a.ffn_hidden_size, true, {}, r, true,
                                 {RecomputeModule::mlp}));
  }
  mark_recompute_modules(layer, a, is_moe);
  // Full recompute keeps only the layer's input hidden state (its sequence-parallel shard).
  layer.cost.input_per_token = elements(d(a.hidden_size) / r.seq);
  mark_sac_op(layer, r);
  return layer;
}

MlpKind parse_mlp(const JsonReader& r) {
  const std::string text = r.string_or("mlp", "swiglu");
  if (text == "swiglu") return MlpKind::swiglu;
  if (text == "gelu") return MlpKind::gelu;
  const std::vector<std::string> valid = {"swiglu", "gelu"};
  r.fail("mlp", unknown_name_message("mlp", text, valid));
}

NormKind parse_norm(const JsonReader& r) {
  const std::string text = r.string_or("norm", "rmsnorm");
  if (text == "rmsnorm") return NormKind::rmsnorm;
  if (text == "layernorm") return NormKind::layernorm;
  const std::vector<std::string> valid = {"rmsnorm", "layernorm"};
  r.fail("norm", unknown_name_message("norm", text, valid));
}

PositionEmbedding parse_position(const JsonReader& r) {
  const std::string text = r.string_or("position_embedding", "rope");
  if (text == "rope") return PositionEmbedding::rope;
  if (text == "learned") return PositionEmbedding::learned;
  const std::vector<std::string> valid = {"rope", "learned"};
  r.fail("position_embedding", unknown_name_message("position_embedding", text, valid));
}

// "moe_layers": "all" (default), or a list of layer indices.
std::vector<bool> parse_moe_layers(const JsonReader& r, int64_t num_layers) {
  std::vector<bool> layers(static_cast<std::size_t>(num_layers), true);
  if (!r.has("moe_layers")) return layers;
  const nlohmann::json& v = r.value("moe_layers");
  if (v.is_string()) {
    if (v.get<std::string>() != "all")
      r.fail("moe_layers", "expected \"all\" or a list of layer indices");
    return layers;
  }
  std::fill(layers.begin(), layers.end(), false);
  for (int64_t index : r.integers("moe_layers")) {
    if (index < 0 || index >= num_layers) {
      r.fail("moe_layers", fmt::format("layer index {} is outside 0..{}", index, num_layers - 1));
    }
    layers[static_cast<std::size_t>(index)] = true;
  }
  return layers;
}

}  // namespace

TransformerArch parse_transformer_arch(const JsonReader& r, bool is_moe) {
  std::vector<std::string> known = {"name",
                                    "family",
                                    "source",
                                    "notes",
                                    "vocab_size",
                                    "hidden_size",
                                    "num_layers",
                                    "num_heads",
                                    "num_kv_heads",
                                    "head_dim",
                                    "ffn_hidden_size",
                                    "mlp",
                                    "norm",
                                    "tie_embeddings",
                                    "bias",
                                    "qkv_bias",
                                    "position_embedding",
                                    "max_position_embeddings",
                                    "dropout",
                                    "flash_attention",
                                    "causal",
                                    "dtype",
                                    "attention",
                                    "q_lora_rank",
                                    "kv_lora_rank",
                                    "qk_nope_head_dim",
                                    "qk_rope_head_dim",
                                    "v_head_dim"};
  if (is_moe) {
    known.insert(known.end(), {"num_experts", "experts_per_token", "moe_ffn_hidden_size",
                               "num_shared_experts", "moe_layers"});
  }
  r.expect_only(known);
  TransformerArch a;
  a.vocab_size = r.positive_integer("vocab_size");
  a.hidden_size = r.positive_integer("hidden_size");
  a.num_layers = r.positive_integer("num_layers");
  a.num_heads = r.positive_integer("num_heads");
  a.num_kv_heads = r.positive_integer_or("num_kv_heads", a.num_heads);
  a.head_dim = r.positive_integer_or("head_dim", 0);
  a.ffn_hidden_size = r.positive_integer_or("ffn_hidden_size", is_moe ? 0 : -1);
  if (a.ffn_hidden_size < 0) a.ffn_hidden_size = r.positive_integer("ffn_hidden_size");
  a.mlp = parse_mlp(r);
  a.norm = parse_norm(r);
  a.tie_embeddings = r.boolean_or("tie_embeddings", false);
  a.bias = r.boolean_or("bias", false);
  a.qkv_bias = r.boolean_or("qkv_bias", false);
  a.position_embedding = parse_position(r);
  a.max_position_embeddings = r.positive_integer_or("max_position_embeddings", 0);
  if (a.position_embedding == PositionEmbedding::learned && a.max_position_embeddings == 0) {
    r.fail("max_position_embeddings", "required with position_embedding \"learned\"");
  }
  a.dropout = r.boolean_or("dropout", false);
  a.flash_attention = r.boolean_or("flash_attention", true);
  a.causal = r.boolean_or("causal", true);
  a.dtype = parse_dtype(r.string_or("dtype", "bf16"), r.file(), r.path_of("dtype"));
  const std::string attention_kind = r.string_or("attention", "gqa");
  if (attention_kind == "mla") {
    // What standard attention's fields would change is not modelled for MLA.
    if (a.bias || a.qkv_bias || a.dropout || !a.flash_attention) {
      r.fail(a.bias       ? "bias"
             : a.qkv_bias ? "qkv_bias"
             : a.dropout  ? "dropout"
                          : "flash_attention",
             "is not modelled with multi-head latent attention");
    }
    for (const char* key : {"num_kv_heads", "head_dim"}) {
      if (r.has(key)) {
        r.fail(key,
               "does not apply to multi-head latent attention (see qk_nope_head_dim, "
               "qk_rope_head_dim and v_head_dim)");
      }
    }
    a.q_lora_rank = r.integer_or("q_lora_rank", 0);
    if (a.q_lora_rank < 0) r.fail("q_lora_rank", "must not be negative (0: no query latent)");
    a.kv_lora_rank = r.positive_integer("kv_lora_rank");
    a.qk_nope_head_dim = r.positive_integer("qk_nope_head_dim");
    a.qk_rope_head_dim = r.positive_integer("qk_rope_head_dim");
    a.v_head_dim = r.positive_integer("v_head_dim");
    if (a.position_embedding != PositionEmbedding::rope) {
      r.fail("position_embedding", "multi-head latent attention carries RoPE in its keys");
    }
  } else if (attention_kind != "gqa") {
    const std::vector<std::string> valid = {"gqa", "mla"};
    r.fail("attention", unknown_name_message("attention", attention_kind, valid));
  } else {
    for (const char* key :
         {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
      if (r.has(key)) r.fail(key, "only applies with \"attention\": \"mla\"");
    }
  }
  if (is_moe) {
    a.num_experts = r.positive_integer("num_experts");
    a.experts_per_token = r.positive_integer("experts_per_token");
    a.moe_ffn_hidden_size = r.positive_integer("moe_ffn_hidden_size");
    a.num_shared_experts = r.integer_or("num_shared_experts", 0);
    if (a.num_shared_experts < 0) r.fail("num_shared_experts", "must not be negative");
    a.moe_layers = parse_moe_layers(r, a.num_layers);
    if (a.experts_per_token > a.num_experts) {
      r.fail("experts_per_token",
             fmt::format("{} exceeds num_experts {}", a.experts_per_token, a.num_experts));
    }
    const bool has_dense =
        std::find(a.moe_layers.begin(), a.moe_layers.end(), false) != a.moe_layers.end();
    if (has_dense && a.ffn_hidden_size == 0) {
      r.fail("ffn_hidden_size", "required when some layers are dense (see moe_layers)");
    }
  }
  // Bounds that keep parameter counts exact and the module tree a sane size.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (const char* key :
       {"vocab_size", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
        "moe_ffn_hidden_size", "max_position_embeddings", "q_lora_rank", "kv_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
    if (r.has(key) && r.integer(key) > kMaxDim) r.fail(key, "exceeds 2^24");
  }
  if (a.num_layers > 10000) r.fail("num_layers", "exceeds 10000");
  if (a.num_experts > 4096) r.fail("num_experts", "exceeds 4096");
  if (a.head_dim == 0) {
    if (a.hidden_size % a.num_heads != 0) {
      r.fail("num_heads", fmt::format("hidden_size {} is not divisible by num_heads {}; set "
                                      "head_dim",
                                      a.hidden_size, a.num_heads));
    }
    a.head_dim = a.hidden_size / a.num_heads;
  }
  if (a.num_heads % a.num_kv_heads != 0) {
    r.fail("num_kv_heads", fmt::format("num_heads {} is not a multiple of num_kv_heads {}",
                                       a.num_heads, a.num_kv_heads));
  }
  return a;
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t tp) {
  if (tp <= 1) return vocab_size;
  return round_up(vocab_size, kMakeVocabSizeDivisibleBy * tp);
}

ModelSpec build_transformer(const TransformerArch& a, std::string name, std::string source,
                            const ModelParallel& p) {
  const Ranks r = ranks_of(p);
  ModelSpec spec;
  spec.name = std::move(name);
  spec.family = a.num_experts > 0 ? "moe" : "transformer";
  spec.source = std::move(source);
  spec.default_unit_modules = {"layers.*"};
  spec.hidden_size = a.hidden_size;
  spec.num_layers = a.num_layers;
  spec.vocab_size = a.vocab_size;
  if (a.position_embedding == PositionEmbedding::learned)
    spec.max_seq_len = a.max_position_embeddings;
  spec.arch = std::make_shared<const TransformerArch>(a);

  const double h = d(a.hidden_size);
  // Vocabulary-parallel embedding and output layer: each tensor-parallel rank holds
  // vocab / t rows of the padded vocabulary.
  const int64_t vocab = padded_vocab_size(a.vocab_size, p.tp);
  const double local_vocab = d(vocab) / r.t;
  Module& root = spec.root;
  root.type = a.num_experts > 0 ? "MoECausalLM" : "CausalLM";

  Module embed{.name = "embed_tokens", .type = "Embedding"};
  const bool split_embedding = p.tp > 1 && p.vocab_parallel_embedding;
  embed.parameters.push_back(
      param("weight", {split_embedding ? vocab / p.tp : vocab, a.hidden_size}, a.dtype));
  embed.cost.kind = ComputeKind::embedding;
  embed.cost.fwd_io_elements_per_token = h;
  // The backward scatters into the rows of the token ids (int64); dropout on the
  // embedding output keeps a 1-byte mask (on the sequence-parallel shard).
  embed.cost.saved_per_token = fixed(8.0 + (a.dropout ? h / r.seq : 0.0));
  embed.cost.input_per_token = fixed(8.0);
  // Each rank looks up the ids in its vocabulary rows; the partial embeddings are summed:
  // reduce-scattered into the sequence-parallel shard (its backward all-gathers the
  // gradient), or all-reduced without sequence parallelism. A replicated embedding looks
  // up every token on every rank; the first sequence-parallel norm takes its shard (a
  // slice), whose backward all-gathers the gradient (DTensor's Shard → Replicate).
  if (p.tp > 1 && !split_embedding) {
    if (p.sequence_parallel) {
      embed.cost.comms = {
          comm(CommPhase::backward, CommKind::all_gather, MeshAxis::tp, elements(h))};
    }
  } else if (p.tp > 1) {
    embed.cost.comms = {comm(CommPhase::forward,
                             p.sequence_parallel ? CommKind::reduce_scatter : CommKind::all_reduce,
                             MeshAxis::tp, elements(h))};
    if (p.sequence_parallel) {
      embed.cost.comms.push_back(
          comm(CommPhase::backward, CommKind::all_gather, MeshAxis::tp, elements(h)));
    }
  }
  root.children.push_back(std::move(embed));
  if (a.position_embedding == PositionEmbedding::learned) {
    Module pos{.name = "embed_positions", .type = "Embedding"};
    pos.parameters.push_back(param("weight", {a.max_position_embeddings, a.hidden_size}, a.dtype));
    pos.cost.kind = ComputeKind::embedding;
    pos.cost.fwd_io_elements_per_token = h;
    pos.cost.saved_per_token = fixed(8.0);
    pos.cost.input_per_token = fixed(8.0);
    root.children.push_back(std::move(pos));
  }
  for (int64_t i = 0; i < a.num_layers; ++i) root.children.push_back(decoder_layer(i, a, r));
  root.children.push_back(norm("norm", a, r));

  // The output layer is column-parallel over the vocabulary: its input is gathered like a
  // block's (backward: re-gathered, and the input gradient reduce-scattered).
  Module head = linear("lm_head", a.hidden_size, vocab, false, a.dtype, true, {}, Split::column, r);
  // FP8 recipes leave the output layer in BF16: Megatron builds it as its own
  // ColumnParallelLinear, outside Transformer Engine's fp8_autocast modules; torchtitan's
  // Float8 conversion filters it out (filter_fqns "output").
  head.cost.bf16_under_fp8 = true;
  if (a.tie_embeddings) {
    head.parameters.clear();  // uses embed_tokens.weight
    head.type = "Linear(tied to embed_tokens.weight)";
  }
  // The logits stay split over the vocabulary, so only the input side of a block's
  // collectives runs; without a vocabulary-parallel loss they are all-gathered to every
  // rank first (its backward takes the rank's slice of the gradient: no collective).
  const bool gathered_logits = p.tp > 1 && !p.vocab_parallel_loss;
  if (p.tp > 1 && p.sequence_parallel) {
    head.cost.comms = {
        comm(CommPhase::forward, CommKind::all_gather, MeshAxis::tp, elements(h)),
        comm(CommPhase::backward, CommKind::all_gather, MeshAxis::tp, elements(h)),
        comm(CommPhase::backward, CommKind::reduce_scatter, MeshAxis::tp, elements(h))};
  } else if (p.tp > 1) {
    head.cost.comms = {comm(CommPhase::backward, CommKind::all_reduce, MeshAxis::tp, elements(h))};
  }
  if (gathered_logits) {
    head.cost.comms.push_back(
        comm(CommPhase::forward, CommKind::all_gather, MeshAxis::tp, elements(d(vocab))));
  }
  root.children.push_back(std::move(head));
  const double loss_vocab = gathered_logits ? d(vocab) : local_vocab;

  // Cross entropy keeps the fp32 softmax of the logits (Korthikanti et al.: 4·s·b·v) and
  // the int64 labels. Vocabulary-parallel (Megatron's VocabParallelCrossEntropy): each rank
  // holds its vocab / t logits and all-reduces, per token, the fp32 maximum, the target's
  // logit and the sum of exponentials.
  Module loss{.name = "loss", .type = "CrossEntropy"};
  loss.cost.kind = ComputeKind::elementwise;
  loss.cost.fwd_io_elements_per_token = 2.0 * loss_vocab;
  loss.cost.saved_per_token = fixed(4.0 * loss_vocab + 8.0);
  loss.cost.input_per_token = elements(loss_vocab);
  // Beyond the saved softmax: Megatron's fused cross entropy holds the bf16 logits while it
  // casts them to fp32 and computes the gradient in place on the softmax
  // (megatron/core/tensor_parallel/cross_entropy.py); PyTorch's
  // cross_entropy(logits.float()) holds, in backward, the fp32 gradient of the log-softmax
  // output and the fp32 input gradient beside the saved log-softmax (8 bytes per
  // vocabulary entry; the forward holds 6: the bf16 logits and their fp32 copy).
  loss.cost.workspace_per_token = elements(loss_vocab);
  loss.cost.pytorch_workspace_per_token = fixed(8.0 * loss_vocab);
  // F.cross_entropy on the bf16 logits themselves (KempnerForge's cross_entropy_loss, no
  // .float()): log_softmax saves its output in the logits' dtype, and backward holds the
  // gradient of that output and the logits' gradient in it too. Compiled (inductor fuses
  // the cast, log-softmax and NLL): it keeps the bf16 logits (with the fp32 log-sum-exp,
  // within the 8 bytes of the label here) and backward writes their gradient in one kernel.
  loss.cost.logits_loss = true;
  loss.cost.native_loss_saved_per_token = elements_and_fixed(loss_vocab, 8.0);
  loss.cost.native_loss_workspace_per_token = elements(2.0 * loss_vocab);
  loss.cost.compiled_loss_workspace_per_token = elements(loss_vocab);
  if (p.tp > 1 && !gathered_logits) {
    loss.cost.comms = {comm(CommPhase::forward, CommKind::all_reduce, MeshAxis::tp, fixed(4.0), 3)};
  }
  root.children.push_back(std::move(loss));
  root.cost.input_per_token = fixed(8.0);
  return spec;
}

ModelSpec parallel_model(const ModelSpec& model, const ModelParallel& p) {
  if (model.arch == nullptr) {
    throw std::logic_error("parallel_model: " + model.name + " has no transformer architecture");
  }
  return build_transformer(*model.arch, model.name, model.source, p);
}

}  // namespace shardplan
