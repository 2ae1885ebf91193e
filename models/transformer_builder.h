#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/dtype.h"
#include "models/json_reader.h"
#include "models/model_spec.h"

namespace shardplan {

enum class MlpKind { swiglu, gelu };
enum class NormKind { rmsnorm, layernorm };
enum class PositionEmbedding { rope, learned };

// A decoder-only transformer, dense or mixture-of-experts. Field names follow the JSON
// form in docs/formats.md; a value of 0 means "derive it" where noted.
struct TransformerArch {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // GQA groups; 0 = num_heads (multi-head attention)
  int64_t head_dim = 0;      // 0 = hidden_size / num_heads
  int64_t ffn_hidden_size = 0;
  MlpKind mlp = MlpKind::swiglu;
  NormKind norm = NormKind::rmsnorm;
  bool tie_embeddings = false;
  bool bias = false;      // biases on every linear layer and on layernorm
  bool qkv_bias = false;  // biases on q/k/v only (Qwen-style); implied by `bias`
  PositionEmbedding position_embedding = PositionEmbedding::rope;
  int64_t max_position_embeddings = 0;  // learned position table rows
  bool dropout = false;                 // dropout layers present (GPT-3); masks are saved
  bool flash_attention = true;          // no s² attention probabilities are saved
  bool causal = true;
  DType dtype = DType::bf16;
  // Multi-head latent attention (DeepSeek-V2/V3; "attention": "mla"): queries through a
  // q_lora_rank bottleneck (0: projected directly), keys and values through a
  // kv_lora_rank latent, each head's query and key a qk_nope_head_dim part and a shared
  // qk_rope_head_dim RoPE part, values v_head_dim. kv_lora_rank = 0: standard attention.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }
  // Mixture of experts (family "moe"); num_experts = 0 for a dense model.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_ffn_hidden_size = 0;
  int64_t num_shared_experts = 0;
  std::vector<bool> moe_layers;  // per layer: is its MLP a mixture of experts

  bool operator==(const TransformerArch&) const = default;
};

// Reads and checks the family fields of a "transformer" or "moe" model file (sizes,
// divisibility, unknown keys); every error names the file and field.
TransformerArch parse_transformer_arch(const JsonReader& reader, bool moe);

// Megatron's --make-vocab-size-divisible-by default: under tensor parallelism the
// vocabulary is padded to a multiple of this × tp (megatron/training/tokenizer,
// _vocab_size_with_padding).
inline constexpr int64_t kMakeVocabSizeDivisibleBy = 128;

// The vocabulary rows the embedding and output layer hold across `tp` ranks: unpadded
// without tensor parallelism (as Hugging Face and torchtitan models are), padded to a
// multiple of 128 × tp with it (Megatron).
int64_t padded_vocab_size(int64_t vocab_size, int64_t tp);

// Builds the module tree (HF-style names: embed_tokens, layers.N.self_attn.q_proj, ...,
// norm, lm_head, loss) with per-module FLOPs, saved activations and model-parallel
// collectives, for one rank of the `parallel` mesh (whole model by default);
// docs/model.md derives every term. The caller has checked that tp divides the heads, KV
// heads and FFN widths (resolve_fsdp_config).
ModelSpec build_transformer(const TransformerArch& arch, std::string name, std::string source,
                            const ModelParallel& parallel = {});

// The same model rebuilt for one rank of `parallel`; `model` must have an architecture
// (transformer or MoE family).
ModelSpec parallel_model(const ModelSpec& model, const ModelParallel& parallel);

}  // namespace shardplan
