#include "models/transformer_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/error.h"
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

// A Linear y = x·Wᵀ (+ b): 2·in·out FLOPs per token; it saves its input for the weight
// gradient unless a sibling already saved the same tensor (`saves_input` false).
Module linear(const std::string& name, int64_t in, int64_t out, bool bias, DType dtype,
              bool saves_input, Footprint extra_saved = {}) {
  Module m{.name = name, .type = "Linear"};
  m.parameters.push_back(param("weight", {out, in}, dtype));
  if (bias) m.parameters.push_back(param("bias", {out}, dtype));
  m.cost.kind = ComputeKind::gemm;
  m.cost.fwd_flops_per_token = 2.0 * d(in) * d(out);
  m.cost.fwd_io_elements_per_token = d(in) + d(out);
  m.cost.saved_per_token = saves_input ? elements(d(in)) : Footprint{};
  m.cost.saved_per_token += extra_saved;
  m.cost.input_per_token = elements(d(in));
  return m;
}

// RMSNorm saves its input and the fp32 reciprocal RMS per token; LayerNorm also the mean.
Module norm(const std::string& name, const TransformerArch& a) {
  const bool layernorm = a.norm == NormKind::layernorm;
  Module m{.name = name, .type = layernorm ? "LayerNorm" : "RMSNorm"};
  m.parameters.push_back(param("weight", {a.hidden_size}, a.dtype));
  if (layernorm && a.bias) m.parameters.push_back(param("bias", {a.hidden_size}, a.dtype));
  m.cost.kind = ComputeKind::elementwise;
  m.cost.fwd_io_elements_per_token = 2.0 * d(a.hidden_size);
  m.cost.saved_per_token = elements_and_fixed(d(a.hidden_size), layernorm ? 8.0 : 4.0);
  m.cost.input_per_token = elements(d(a.hidden_size));
  return m;
}

int64_t q_dim(const TransformerArch& a) {
  return a.num_heads * a.head_dim;
}
int64_t kv_dim(const TransformerArch& a) {
  return a.num_kv_heads * a.head_dim;
}

Module attention(const std::string& name, const TransformerArch& a) {
  const int64_t h = a.hidden_size;
  const int64_t q = q_dim(a);
  const int64_t kv = kv_dim(a);
  const bool qkv_bias = a.bias || a.qkv_bias;
  Module m{.name = name, .type = "Attention"};
  // q, k and v read the same normed input; it is saved once, by q_proj.
  m.children.push_back(linear(join(name, "q_proj"), h, q, qkv_bias, a.dtype, true));
  m.children.push_back(linear(join(name, "k_proj"), h, kv, qkv_bias, a.dtype, false));
  m.children.push_back(linear(join(name, "v_proj"), h, kv, qkv_bias, a.dtype, false));

  Module core{.name = join(name, "core_attention"),
              .type = a.flash_attention ? "FlashAttention" : "CoreAttention"};
  core.cost.kind = ComputeKind::attention;
  // Scores Q·Kᵀ and values P·V: 2·s·q each per token, before the causal discount.
  core.cost.fwd_flops_per_token_ctx = 4.0 * d(q);
  core.cost.causal = a.causal;
  // Flash attention's backward recomputes the scores: 5 matmuls against 2 (REFERENCES).
  core.cost.bwd_flops_factor = a.flash_attention ? 2.5 : 2.0;
  core.cost.fwd_io_elements_per_token = d(q + 2 * kv) + d(q);
  const Footprint qkv = elements(d(q + 2 * kv));
  core.cost.saved_per_token = qkv;
  if (a.flash_attention) {
    // Flash keeps only the output (saved by o_proj) and the fp32 log-sum-exp per head;
    // its dropout regenerates the mask from the RNG state.
    core.cost.saved_per_token += fixed(4.0 * d(a.num_heads));
  } else {
    // Softmax output per head and key (a·s per token); with dropout also the 1-byte mask
    // and the dropped-out probabilities: Korthikanti's 5·a·s²·b bytes.
    const double heads = d(a.num_heads);
    core.cost.saved_per_token_ctx =
        a.dropout ? elements_and_fixed(2.0 * heads, heads) : elements(heads);
  }
  core.cost.selective_recompute = true;
  core.cost.selective_kept_per_token = qkv;
  core.cost.input_per_token = qkv;
  m.children.push_back(std::move(core));

  // o_proj saves the attention output; the residual dropout after it keeps a mask.
  m.children.push_back(linear(join(name, "o_proj"), q, h, a.bias, a.dtype, true,
                              a.dropout ? fixed(d(h)) : Footprint{}));
  m.cost.input_per_token = elements(d(h));
  return m;
}

// The activation between the up and down projections: SwiGLU (fused, as Megatron and
// TransformerEngine run it) saves the gate and up outputs; GELU saves its input.
Module activation(const std::string& name, MlpKind kind, int64_t ffn) {
  Module m{.name = name, .type = kind == MlpKind::swiglu ? "SwiGLU" : "GELU"};
  m.cost.kind = ComputeKind::elementwise;
  const double saved = kind == MlpKind::swiglu ? 2.0 * d(ffn) : d(ffn);
  m.cost.fwd_io_elements_per_token = saved + d(ffn);
  m.cost.saved_per_token = elements(saved);
  m.cost.input_per_token = elements(saved);
  return m;
}

// A dense MLP. `saves_input` is false when another module (the router) already saved the
// same normed input; `extra_down_saved` adds what the MoE combine keeps.
Module mlp(const std::string& name, const std::string& type, const TransformerArch& a, int64_t ffn,
           bool saves_input, Footprint extra_down_saved) {
  const int64_t h = a.hidden_size;
  Module m{.name = name, .type = type};
  Footprint down_extra = extra_down_saved;
  if (a.dropout) down_extra += fixed(d(h));
  if (a.mlp == MlpKind::swiglu) {
    m.children.push_back(linear(join(name, "gate_proj"), h, ffn, a.bias, a.dtype, saves_input));
    m.children.push_back(linear(join(name, "up_proj"), h, ffn, a.bias, a.dtype, false));
    m.children.push_back(activation(join(name, "act_fn"), a.mlp, ffn));
    m.children.push_back(
        linear(join(name, "down_proj"), ffn, h, a.bias, a.dtype, true, down_extra));
  } else {
    m.children.push_back(linear(join(name, "fc1"), h, ffn, a.bias, a.dtype, saves_input));
    m.children.push_back(activation(join(name, "act_fn"), a.mlp, ffn));
    m.children.push_back(linear(join(name, "fc2"), ffn, h, a.bias, a.dtype, true, down_extra));
  }
  m.cost.input_per_token = elements(d(h));
  return m;
}

// Mixture of experts: a router picks `experts_per_token` of `num_experts` per token;
// each expert sees that share of the tokens on average (uniform routing, no capacity
// drop). Tokens are permuted into a copy per chosen expert (saved by the expert's first
// linear), and the combine keeps each expert output and its fp32 routing weight.
Module moe(const std::string& name, const TransformerArch& a) {
  const int64_t h = a.hidden_size;
  Module m{.name = name, .type = "MoE"};
  Module router = linear(join(name, "router"), h, a.num_experts, false, a.dtype, true,
                         fixed(4.0 * d(a.num_experts)));
  router.type = "Router";
  m.children.push_back(std::move(router));
  const double fraction = d(a.experts_per_token) / d(a.num_experts);
  for (int64_t e = 0; e < a.num_experts; ++e) {
    Module expert = mlp(join(name, fmt::format("experts.{}", e)), "Expert", a,
                        a.moe_ffn_hidden_size, true, elements_and_fixed(d(h), 4.0));
    expert.cost.token_fraction = fraction;
    m.children.push_back(std::move(expert));
  }
  if (a.num_shared_experts > 0) {
    m.children.push_back(mlp(join(name, "shared_experts"), "SharedExpert", a,
                             a.num_shared_experts * a.moe_ffn_hidden_size, false, {}));
  }
  m.cost.input_per_token = elements(d(h));
  return m;
}

Module decoder_layer(int64_t index, const TransformerArch& a) {
  const std::string name = fmt::format("layers.{}", index);
  const bool is_moe = a.num_experts > 0 && a.moe_layers[static_cast<std::size_t>(index)];
  Module layer{.name = name, .type = is_moe ? "MoEDecoderLayer" : "DecoderLayer"};
  layer.children.push_back(norm(join(name, "input_layernorm"), a));
  layer.children.push_back(attention(join(name, "self_attn"), a));
  layer.children.push_back(norm(join(name, "post_attention_layernorm"), a));
  if (is_moe) {
    layer.children.push_back(moe(join(name, "mlp"), a));
  } else {
    layer.children.push_back(mlp(join(name, "mlp"), "MLP", a, a.ffn_hidden_size, true, {}));
  }
  // Full recompute keeps only the layer's input hidden state.
  layer.cost.input_per_token = elements(d(a.hidden_size));
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
                                    "dtype"};
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
  for (const char* key : {"vocab_size", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                          "ffn_hidden_size", "moe_ffn_hidden_size", "max_position_embeddings"}) {
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

ModelSpec build_transformer(const TransformerArch& a, std::string name, std::string source) {
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

  const double h = d(a.hidden_size);
  Module& root = spec.root;
  root.type = a.num_experts > 0 ? "MoECausalLM" : "CausalLM";

  Module embed{.name = "embed_tokens", .type = "Embedding"};
  embed.parameters.push_back(param("weight", {a.vocab_size, a.hidden_size}, a.dtype));
  embed.cost.kind = ComputeKind::embedding;
  embed.cost.fwd_io_elements_per_token = h;
  // The backward scatters into the rows of the token ids (int64); dropout on the
  // embedding output keeps a 1-byte mask.
  embed.cost.saved_per_token = fixed(8.0 + (a.dropout ? h : 0.0));
  embed.cost.input_per_token = fixed(8.0);
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
  for (int64_t i = 0; i < a.num_layers; ++i) root.children.push_back(decoder_layer(i, a));
  root.children.push_back(norm("norm", a));

  Module head = linear("lm_head", a.hidden_size, a.vocab_size, false, a.dtype, true);
  if (a.tie_embeddings) {
    head.parameters.clear();  // uses embed_tokens.weight
    head.type = "Linear(tied to embed_tokens.weight)";
  }
  root.children.push_back(std::move(head));

  // Cross entropy keeps the fp32 softmax of the logits (Korthikanti et al.: 4·s·b·v) and
  // the int64 labels.
  Module loss{.name = "loss", .type = "CrossEntropy"};
  loss.cost.kind = ComputeKind::elementwise;
  loss.cost.fwd_io_elements_per_token = 2.0 * d(a.vocab_size);
  loss.cost.saved_per_token = fixed(4.0 * d(a.vocab_size) + 8.0);
  loss.cost.input_per_token = elements(d(a.vocab_size));
  root.children.push_back(std::move(loss));
  root.cost.input_per_token = fixed(8.0);
  return spec;
}

}  // namespace shardplan
