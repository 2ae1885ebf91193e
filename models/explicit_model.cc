#include "models/explicit_model.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "models/error.h"
#include "models/name_table.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

constexpr NameTable<ComputeKind, 5> kKinds = {{
    {ComputeKind::none, "none"},
    {ComputeKind::gemm, "gemm"},
    {ComputeKind::attention, "attention"},
    {ComputeKind::elementwise, "elementwise"},
    {ComputeKind::embedding, "embedding"},
}};

std::string kind_name(ComputeKind kind) {
  return std::string(name_of(kKinds, kind));
}

ComputeKind parse_kind(const JsonReader& r) {
  const std::string text = r.string_or("kind", "none");
  if (auto kind = value_of(kKinds, text)) return *kind;
  r.fail("kind", unknown_name_message("compute kind", text, names_of(kKinds)));
}

// Per-token costs of one module. A real one is at most a few times its parameters
// (FLOPs: 2 per weight; 2^47 parameters bound them) or its widest activation (elements:
// below 2^30 for any accepted dimension); the bounds are far above both and keep every
// product with the tokens of a micro-batch (at most 2^24) finite and exact enough.
constexpr double kMaxFlopsPerToken = 0x1p53;
constexpr double kMaxCtxFlopsPerToken = 0x1p40;  // × seq_len: attention's per-pair work
constexpr double kMaxElementsPerToken = 0x1p40;  // activation elements or bytes
constexpr double kMaxBackwardFactor = 16;        // backward ÷ forward FLOPs (2 for matmuls)

double per_token(const JsonReader& r, std::string_view key, double max, double fallback = 0) {
  return r.has(key) ? r.number_in(key, 0, max) : fallback;
}

Footprint parse_footprint(const JsonReader& parent, std::string_view key) {
  if (!parent.has(key)) return {};
  const JsonReader r = parent.object(key);
  r.expect_only({"elements", "fixed_bytes"});
  return Footprint{.elements = per_token(r, "elements", kMaxElementsPerToken),
                   .fixed_bytes = per_token(r, "fixed_bytes", kMaxElementsPerToken)};
}

nlohmann::json footprint_json(const Footprint& f) {
  return {{"elements", f.elements}, {"fixed_bytes", f.fixed_bytes}};
}

// The most experts a grouped GEMM stacks, and so the most routed copies of a token a
// module may run (the transformer builder allows 4096 experts).
constexpr int64_t kMaxStackedExperts = 4096;
constexpr double kMaxTokenFraction = 4096;

ModuleCost parse_cost(const JsonReader& r) {
  r.expect_only({"kind", "fwd_flops_per_token", "fwd_flops_per_token_ctx", "causal",
                 "bwd_flops_factor", "fwd_io_elements_per_token", "saved_per_token",
                 "saved_per_token_ctx", "selective_recompute", "selective_kept_per_token",
                 "input_per_token", "token_fraction"});
  ModuleCost c;
  c.kind = parse_kind(r);
  c.fwd_flops_per_token = per_token(r, "fwd_flops_per_token", kMaxFlopsPerToken);
  c.fwd_flops_per_token_ctx = per_token(r, "fwd_flops_per_token_ctx", kMaxCtxFlopsPerToken);
  c.causal = r.boolean_or("causal", false);
  c.bwd_flops_factor = per_token(r, "bwd_flops_factor", kMaxBackwardFactor, 2.0);
  c.fwd_io_elements_per_token = per_token(r, "fwd_io_elements_per_token", kMaxElementsPerToken);
  c.saved_per_token = parse_footprint(r, "saved_per_token");
  c.saved_per_token_ctx = parse_footprint(r, "saved_per_token_ctx");
  c.selective_recompute = r.boolean_or("selective_recompute", false);
  c.selective_kept_per_token = parse_footprint(r, "selective_kept_per_token");
  c.input_per_token = parse_footprint(r, "input_per_token");
  // Above 1 where a module runs several routed copies of each token (a rank's grouped
  // experts: top-k of them).
  c.token_fraction = r.number_or("token_fraction", 1.0);
  if (!(c.token_fraction > 0 && c.token_fraction <= kMaxTokenFraction)) {
    r.fail("token_fraction",
           fmt::format("must be in (0, {}], got {}", kMaxTokenFraction, c.token_fraction));
  }
  return c;
}

// Defaults for the common leaf types, so a captured tree needs no hand-written costs.
ModuleCost default_cost(const Module& m) {
  ModuleCost c;
  if (m.type == "Linear" && !m.parameters.empty() && m.parameters[0].shape.size() == 2) {
    const double out = static_cast<double>(m.parameters[0].shape[0]);
    const double in = static_cast<double>(m.parameters[0].shape[1]);
    c.kind = ComputeKind::gemm;
    c.fwd_flops_per_token = 2.0 * in * out;
    c.fwd_io_elements_per_token = in + out;
    c.saved_per_token.elements = in;
    c.input_per_token.elements = in;
  } else if (m.type == "Embedding") {
    c.kind = ComputeKind::embedding;
    c.saved_per_token.fixed_bytes = 8.0;
    c.input_per_token.fixed_bytes = 8.0;
  }
  return c;
}

Parameter parse_parameter(const JsonReader& r) {
  r.expect_only({"name", "shape", "dtype", "requires_grad"});
  Parameter p;
  p.name = r.string("name");
  if (p.name.empty() || p.name.find('.') != std::string::npos) {
    r.fail("name", "must be a non-empty local name without '.'");
  }
  p.shape = r.integers("shape");
  int64_t numel = 1;
  for (std::size_t i = 0; i < p.shape.size(); ++i) {
    if (p.shape[i] <= 0) {
      r.fail("shape", fmt::format("dimension {} must be positive, got {}", i, p.shape[i]));
    }
    // Parameter counts stay below 2^53, where doubles still count them exactly.
    if (__builtin_mul_overflow(numel, p.shape[i], &numel) || numel > (int64_t{1} << 53)) {
      r.fail("shape", "has more than 2^53 elements");
    }
  }
  p.dtype = parse_dtype(r.string_or("dtype", "bf16"), r.file(), r.path_of("dtype"));
  p.requires_grad = r.boolean_or("requires_grad", true);
  return p;
}

// Every walk of the module tree recurses once per level; real models nest a few levels
// (a captured Llama: 4), so 256 is generous and keeps the stack small.
constexpr int kMaxDepth = 256;

Module parse_module(const JsonReader& r, const std::string& prefix, int depth) {
  r.expect_only({"name", "type", "parameters", "stacked_experts", "cost", "children"});
  const bool is_root = depth == 0;
  if (depth > kMaxDepth) r.fail("", fmt::format("modules nest deeper than {} levels", kMaxDepth));
  Module m;
  if (is_root) {
    m.name = "";
  } else {
    const std::string local = r.string("name");
    if (local.empty()) r.fail("name", "must not be empty");
    m.name = prefix.empty() ? local : prefix + "." + local;
  }
  m.type = r.string_or("type", "Module");
  if (r.has("parameters")) {
    std::set<std::string> seen;
    for (const JsonReader& p : r.objects("parameters")) {
      m.parameters.push_back(parse_parameter(p));
      if (!seen.insert(m.parameters.back().name).second) {
        p.fail("name", fmt::format("duplicate parameter '{}'", m.parameters.back().name));
      }
    }
  }
  if (r.has("stacked_experts")) {
    m.stacked_experts = r.integer_in("stacked_experts", 1, kMaxStackedExperts);
    for (const Parameter& p : m.parameters) {
      if (p.shape.empty() || p.shape.front() != m.stacked_experts) {
        r.fail("stacked_experts",
               fmt::format("parameter '{}' must stack {} experts along its first dimension", p.name,
                           m.stacked_experts));
      }
    }
  }
  m.cost = r.has("cost") ? parse_cost(r.object("cost")) : default_cost(m);
  if (r.has("children")) {
    std::set<std::string> seen;
    for (const JsonReader& c : r.objects("children")) {
      m.children.push_back(parse_module(c, m.name, depth + 1));
      if (!seen.insert(m.children.back().name).second) {
        c.fail("name", fmt::format("duplicate module '{}'", m.children.back().name));
      }
    }
  }
  return m;
}

// A child's name relative to its parent; it may hold dots when the tree skips a level
// (the transformer builder puts "layers.3" straight under the root).
std::string local_name(const Module& m, const std::string& parent) {
  return parent.empty() ? m.name : m.name.substr(parent.size() + 1);
}

nlohmann::json module_json(const Module& m, const std::string& parent, bool is_root) {
  nlohmann::json j;
  if (!is_root) j["name"] = local_name(m, parent);
  j["type"] = m.type;
  if (!m.parameters.empty()) {
    nlohmann::json params = nlohmann::json::array();
    for (const Parameter& p : m.parameters) {
      params.push_back({{"name", p.name},
                        {"shape", p.shape},
                        {"dtype", std::string(dtype_name(p.dtype))},
                        {"requires_grad", p.requires_grad}});
    }
    j["parameters"] = std::move(params);
  }
  if (m.stacked_experts > 1) j["stacked_experts"] = m.stacked_experts;
  const ModuleCost& c = m.cost;
  j["cost"] = {{"kind", kind_name(c.kind)},
               {"fwd_flops_per_token", c.fwd_flops_per_token},
               {"fwd_flops_per_token_ctx", c.fwd_flops_per_token_ctx},
               {"causal", c.causal},
               {"bwd_flops_factor", c.bwd_flops_factor},
               {"fwd_io_elements_per_token", c.fwd_io_elements_per_token},
               {"saved_per_token", footprint_json(c.saved_per_token)},
               {"saved_per_token_ctx", footprint_json(c.saved_per_token_ctx)},
               {"selective_recompute", c.selective_recompute},
               {"selective_kept_per_token", footprint_json(c.selective_kept_per_token)},
               {"input_per_token", footprint_json(c.input_per_token)},
               {"token_fraction", c.token_fraction}};
  if (!m.children.empty()) {
    nlohmann::json children = nlohmann::json::array();
    for (const Module& child : m.children) children.push_back(module_json(child, m.name, false));
    j["children"] = std::move(children);
  }
  return j;
}

}  // namespace

ModelSpec parse_explicit_model(const JsonReader& r) {
  r.expect_only({"name", "family", "source", "notes", "default_unit_modules", "hidden_size",
                 "num_layers", "vocab_size", "max_seq_len", "root", "capture"});
  // A file written by traces/capture carries how it was captured; the model is the tree.
  if (r.has("capture")) (void)r.object("capture");
  ModelSpec spec;
  spec.name = r.string("name");
  spec.family = "explicit";
  spec.source = r.string_or("source", "");
  if (r.has("default_unit_modules")) spec.default_unit_modules = r.strings("default_unit_modules");
  // Headline dimensions for tables (0: none); max_seq_len also bounds seq_len.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  spec.hidden_size = r.integer_in_or("hidden_size", 0, kMaxDim, 0);
  spec.num_layers = r.integer_in_or("num_layers", 0, kMaxDim, 0);
  spec.vocab_size = r.integer_in_or("vocab_size", 0, kMaxDim, 0);
  spec.max_seq_len = r.integer_in_or("max_seq_len", 0, kMaxDim, 0);
  spec.root = parse_module(r.object("root"), "", 0);
  const std::optional<int64_t> count = parameter_count_within(spec.root, INT64_MAX);
  if (count == 0) r.fail("root", "the model has no parameters");
  return spec;
}

nlohmann::json model_to_explicit_json(const ModelSpec& spec) {
  nlohmann::json j;
  j["name"] = spec.name;
  j["family"] = "explicit";
  j["source"] = spec.source;
  j["default_unit_modules"] = spec.default_unit_modules;
  j["hidden_size"] = spec.hidden_size;
  j["num_layers"] = spec.num_layers;
  j["vocab_size"] = spec.vocab_size;
  j["max_seq_len"] = spec.max_seq_len;
  j["root"] = module_json(spec.root, "", true);
  return j;
}

}  // namespace shardplan
