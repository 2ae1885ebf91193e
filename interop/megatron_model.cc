// The model a Megatron-LM (or Megatron-Bridge) argument set builds, as a shardplan model
// file. Defaults are Megatron-LM's command-line defaults at d98e8a6 (arguments.py
// validate_args and the TransformerConfig dataclass), which differ from the zoo's: biases
// on, LayerNorm, GeLU, learned positions, tied embeddings, dropout 0.1.
#include "interop/internal/megatron_model.h"

#include <fmt/format.h>

#include "interop/internal/arg_reader.h"
#include "models/error.h"

namespace shardplan {
namespace {

// GPT-2's BPE vocabulary (its encoder.json holds 50,257 tokens), the one
// --tokenizer-type GPT2BPETokenizer reads.
constexpr int64_t kGpt2Vocab = 50257;

// Model sizes (layers, widths, heads, experts, vocabulary) are read in [1, 2^24]: far above
// any model's (the widest, 53 248 in Llama 3.1 405B's FFN; 256 experts in DeepSeek-V3), and
// small enough that products of two (kv_channels × heads) stay far inside int64.
constexpr int64_t kMaxModelSize = int64_t{1} << 24;

// An optional size: in range when given.
std::optional<int64_t> positive(ArgReader& r, const std::string& dest) {
  const std::optional<int64_t> v = r.integer(dest);
  if (v && (*v <= 0 || *v > kMaxModelSize)) {
    r.fail(dest, fmt::format("must be in [1, 2^24], got {}", *v));
  }
  return v;
}

int64_t required(ArgReader& r, const std::string& dest) {
  const std::optional<int64_t> v = positive(r, dest);
  if (!v) r.fail(dest, "is required (Megatron-LM asserts it); shardplan needs it for the model");
  return *v;
}

// --moe-layer-freq: N (every Nth layer, from the first) or a Python list expression of
// 0/1 per layer such as "([0]*3+[1]*5)" (the characters Megatron's _eval_pattern allows).
class PatternParser {
 public:
  PatternParser(std::string text, ArgReader& r) : text_(std::move(text)), r_(r) {}

  std::vector<int64_t> parse() {
    std::vector<int64_t> out = sum();
    skip();
    if (pos_ != text_.size()) bad();
    return out;
  }

 private:
  [[noreturn]] void bad() {
    r_.fail("moe_layer_freq",
            fmt::format("cannot read {}: expected N or a list such as ([0]*3+[1]*5)",
                        quote_input(text_)));
  }
  void skip() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  int64_t integer() {
    skip();
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) != 0)
      ++pos_;
    if (pos_ == start || pos_ - start > 6) bad();
    return std::stoll(text_.substr(start, pos_ - start));
  }
  std::vector<int64_t> sum() {
    // Megatron evaluates the text as Python; deeper nesting than any real pattern is refused
    // here rather than recursed into.
    if (++depth_ > kMaxDepth) bad();
    std::vector<int64_t> out = product();
    while (eat('+')) {
      const std::vector<int64_t> more = product();
      out.insert(out.end(), more.begin(), more.end());
      if (out.size() > 100000) bad();
    }
    --depth_;
    return out;
  }
  std::vector<int64_t> product() {
    std::vector<int64_t> out = atom();
    while (eat('*')) {
      const int64_t times = integer();
      if (times > 100000 || out.size() * static_cast<std::size_t>(times) > 100000) bad();
      std::vector<int64_t> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), out.begin(), out.end());
      out = std::move(repeated);
    }
    return out;
  }
  std::vector<int64_t> atom() {
    if (eat('(')) {
      std::vector<int64_t> out = sum();
      if (!eat(')')) bad();
      return out;
    }
    if (!eat('[')) bad();
    std::vector<int64_t> out;
    if (eat(']')) return out;
    do {
      out.push_back(integer());
    } while (eat(','));
    if (!eat(']')) bad();
    return out;
  }

  static constexpr int kMaxDepth = 64;
  std::string text_;
  ArgReader& r_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

std::vector<int64_t> moe_layer_indices(ArgReader& r, int64_t num_layers) {
  std::vector<int64_t> flags;
  // A Bridge config may hold the list itself.
  const std::vector<std::string> words = r.has("moe_layer_freq") && r.is_list("moe_layer_freq")
                                             ? r.texts("moe_layer_freq")
                                             : std::vector<std::string>{};
  const std::optional<std::string> freq =
      words.empty()
          ? r.text("moe_layer_freq")
          : std::optional<std::string>("[" + fmt::format("{}", fmt::join(words, ",")) + "]");
  if (!freq || (!freq->empty() && freq->size() <= 6 &&
                freq->find_first_not_of("0123456789") == std::string::npos)) {
    const int64_t every = freq ? std::stoll(*freq) : 1;
    if (every <= 0) r.fail("moe_layer_freq", "must be positive");
    for (int64_t i = 0; i < num_layers; ++i) flags.push_back(i % every == 0 ? 1 : 0);
  } else {
    flags = PatternParser(*freq, r).parse();
    if (static_cast<int64_t>(flags.size()) != num_layers) {
      r.fail("moe_layer_freq", fmt::format("lists {} layers, the model has {} (--num-layers)",
                                           flags.size(), num_layers));
    }
  }
  std::vector<int64_t> indices;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0 && flags[i] != 1) r.fail("moe_layer_freq", "entries must be 0 or 1");
    if (flags[i] == 1) indices.push_back(static_cast<int64_t>(i));
  }
  return indices;
}

void read_moe(ArgReader& r, nlohmann::json& m, int64_t num_layers, int64_t ffn) {
  m["family"] = "moe";
  m["num_experts"] = required(r, "num_experts");
  // Megatron's --moe-router-topk default (TransformerConfig.moe_router_topk = 2).
  m["experts_per_token"] = positive(r, "moe_router_topk").value_or(2);
  const int64_t expert_ffn = positive(r, "moe_ffn_hidden_size").value_or(ffn);
  m["moe_ffn_hidden_size"] = expert_ffn;
  if (const auto shared = positive(r, "moe_shared_expert_intermediate_size")) {
    // Megatron gives the shared experts' total width; the model counts experts of the
    // routed experts' width.
    if (*shared % expert_ffn != 0) {
      r.fail("moe_shared_expert_intermediate_size",
             fmt::format("{} is not a multiple of the expert width {}; shardplan models shared "
                         "experts as whole experts",
                         *shared, expert_ffn));
    }
    m["num_shared_experts"] = *shared / expert_ffn;
  }
  m["moe_layers"] = moe_layer_indices(r, num_layers);
  // Without dense layers the dense width is unused (the zoo leaves it out).
  if (static_cast<int64_t>(m["moe_layers"].size()) == num_layers) m.erase("ffn_hidden_size");
  if (r.has("moe_grouped_gemm")) r.use("moe_grouped_gemm");  // the model's experts are grouped
}

void read_attention(ArgReader& r, nlohmann::json& m, int64_t hidden, int64_t heads) {
  if (r.flag("multi_latent_attention")) {
    m["attention"] = "mla";
    // The command-line defaults (arguments.py), not MLATransformerConfig's.
    m["q_lora_rank"] = r.integer_or("q_lora_rank", 0);
    m["kv_lora_rank"] = r.integer_or("kv_lora_rank", 32);
    m["qk_nope_head_dim"] = r.integer_or("qk_head_dim", 128);
    m["qk_rope_head_dim"] = r.integer_or("qk_pos_emb_head_dim", 64);
    m["v_head_dim"] = r.integer_or("v_head_dim", 128);
    return;
  }
  // --num-query-groups counts only with --group-query-attention (argument_utils.py
  // core_transformer_config_from_args); its command-line default is 1.
  const bool gqa = r.flag("group_query_attention");
  const int64_t groups = positive(r, "num_query_groups").value_or(1);
  if (gqa && groups != heads) m["num_kv_heads"] = groups;
  if (!gqa && r.has("num_query_groups")) {
    r.not_modelled("num_query_groups", "ignored without --group-query-attention, as Megatron does");
  }
  if (const auto kv_channels = positive(r, "kv_channels");
      kv_channels && *kv_channels * heads != hidden) {
    m["head_dim"] = *kv_channels;
  }
}

int64_t vocabulary(ArgReader& r, int64_t tp, bool bridge) {
  if (const auto padded = positive(r, "padded_vocab_size")) return *padded;
  std::optional<int64_t> vocab = positive(r, "vocab_size");
  // Bridge: the model's vocabulary, else the tokenizer's.
  if (!vocab) vocab = positive(r, "tokenizer_vocab_size");
  const std::optional<std::string> tokenizer = r.text("tokenizer_type");
  // pretrain_gpt.py's default tokenizer is GPT2BPETokenizer (validate_args args_defaults).
  if (!vocab && (!tokenizer || *tokenizer == "GPT2BPETokenizer")) vocab = kGpt2Vocab;
  if (!vocab) {
    r.fail("vocab_size",
           "is needed to size the embedding (shardplan reads no tokenizer files): give "
           "--vocab-size or --padded-vocab-size");
  }
  // Bridge's GPTModelProvider.should_pad_vocab defaults to False; the command line pads.
  if (!r.flag("pad_vocab_size", !bridge)) return *vocab;
  // Megatron pads to a multiple of --make-vocab-size-divisible-by × tp
  // (vocab_size_with_padding); the model pads to 128 × tp itself under tensor parallelism,
  // so only another divisor changes the size read here.
  const int64_t divisor = positive(r, "make_vocab_size_divisible_by").value_or(128);
  if (tp > (int64_t{1} << 20)) r.fail("tensor_model_parallel_size", "exceeds 2^20");
  const int64_t multiple = divisor * (divisor == 128 ? 1 : tp);
  return (*vocab + multiple - 1) / multiple * multiple;
}

}  // namespace

nlohmann::json megatron_model_json(ArgReader& r, const std::string& name, int64_t tp, bool bridge) {
  nlohmann::json m;
  m["name"] = name;
  m["family"] = "transformer";
  m["source"] = "read from Megatron-LM arguments (" + r.label() + ")";
  const int64_t layers = required(r, "num_layers");
  const int64_t hidden = required(r, "hidden_size");
  const int64_t heads = required(r, "num_attention_heads");
  const bool swiglu = r.flag("swiglu");
  // arguments.py validate_args: 4h, or with SwiGLU int((4h·2/3)/64)·64 = ⌊8h/192⌋·64; a
  // Bridge config gets TransformerConfig.__post_init__'s 4h either way.
  const int64_t ffn = positive(r, "ffn_hidden_size")
                          .value_or(swiglu && !bridge ? 8 * hidden / 192 * 64 : 4 * hidden);
  m["vocab_size"] = vocabulary(r, tp, bridge);
  m["hidden_size"] = hidden;
  m["num_layers"] = layers;
  m["num_heads"] = heads;
  read_attention(r, m, hidden, heads);
  m["ffn_hidden_size"] = ffn;
  m["mlp"] = swiglu ? "swiglu" : "gelu";
  if (const auto activation = r.text("activation_func")) {
    if (*activation != "silu" && *activation != "gelu") {
      r.not_modelled("activation_func", "modelled as " + std::string(swiglu ? "SwiGLU" : "GeLU"));
    }
  }
  const std::string norm = r.text("normalization").value_or("LayerNorm");
  if (norm != "LayerNorm" && norm != "RMSNorm") {
    r.fail("normalization", fmt::format("{} is not LayerNorm or RMSNorm", quote_input(norm)));
  }
  m["norm"] = norm == "RMSNorm" ? "rmsnorm" : "layernorm";
  m["tie_embeddings"] = !r.flag("untie_embeddings_and_output_weights");
  m["bias"] = r.flag("add_bias_linear", true);  // --disable-bias-linear clears it
  if (r.flag("add_qkv_bias") && !m["bias"].get<bool>()) m["qkv_bias"] = true;
  // --use-rotary-position-embeddings: the old spelling of rope (validate_args).
  const bool old_rope = r.flag("use_rotary_position_embeddings");
  const std::string position =
      r.text("position_embedding_type").value_or(old_rope ? "rope" : "learned_absolute");
  if (position == "learned_absolute") {
    m["position_embedding"] = "learned";
    // GPTModelProvider has no max_position_embeddings: its table is seq_length long.
    const std::optional<int64_t> rows = positive(r, "max_position_embeddings");
    m["max_position_embeddings"] = rows     ? *rows
                                   : bridge ? required(r, "seq_length")
                                            : required(r, "max_position_embeddings");
  } else {
    m["position_embedding"] = "rope";
    if (position != "rope") {
      r.not_modelled("position_embedding_type", "modelled as RoPE (no parameters, the same work)");
    }
    r.use("max_position_embeddings");
  }
  // Megatron's dropout defaults are 0.1 (TransformerConfig hidden_dropout, attention_dropout).
  const double dropout = std::max(r.number("hidden_dropout").value_or(0.1),
                                  r.number("attention_dropout").value_or(0.1));
  if (dropout > 0) m["dropout"] = true;
  if (r.text("attention_backend") == "unfused") m["flash_attention"] = false;
  if (r.has("num_experts") && r.integer("num_experts") == 1) {
    // Megatron-DeepSpeed's dense scripts pass --num-experts 1 (its default, a list of one):
    // one expert per layer is the dense MLP, which Megatron-LM's router (top-2 by default)
    // could not route to anyway.
    r.not_modelled("num_experts", "one expert per layer is a dense MLP; read as no experts");
  } else if (r.has("num_experts")) {
    read_moe(r, m, layers, ffn);
  }
  return m;
}

}  // namespace shardplan
