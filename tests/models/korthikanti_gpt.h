#pragma once

// Korthikanti et al. 2022's GPT layer (arXiv 2205.05198): LayerNorm, multi-head
// attention, GELU MLP of 4h, dropout, 2-byte activations; the activation tests' reference.
#include "models/transformer_builder.h"

namespace shardplan::testing {

inline TransformerArch korthikanti_gpt(bool flash) {
  TransformerArch a;
  a.vocab_size = 51200;
  a.hidden_size = 1024;
  a.num_layers = 2;
  a.num_heads = 16;
  a.num_kv_heads = 16;
  a.head_dim = 64;
  a.ffn_hidden_size = 4096;
  a.mlp = MlpKind::gelu;
  a.norm = NormKind::layernorm;
  a.bias = true;
  a.dropout = true;
  a.flash_attention = flash;
  a.position_embedding = PositionEmbedding::learned;
  a.max_position_embeddings = 4096;
  return a;
}

}  // namespace shardplan::testing
