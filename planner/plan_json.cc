#include "planner/plan_json.h"

#include <fmt/format.h>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"
#include "planner/plan_memory.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

template <typename Enum>
Enum parse_named(const JsonReader& r, std::string_view key,
                 std::optional<Enum> (*parse)(std::string_view),
                 std::vector<std::string> (*names)(), const char* what) {
  const std::string text = r.string(key);
  if (auto value = parse(text)) return *value;
  r.fail(key, unknown_name_message(what, text, names()));
}

nlohmann::json ids(const std::vector<int64_t>& v) {
  return v;
}

}  // namespace

namespace {

nlohmann::json gemms_json(const std::vector<GemmShape>& gemms) {
  nlohmann::json out = nlohmann::json::array();
  for (const GemmShape& g : gemms) {
    out.push_back(g.groups > 1 ? nlohmann::json{g.m, g.n, g.k, g.groups}
                               : nlohmann::json{g.m, g.n, g.k});
  }
  return out;
}

std::vector<GemmShape> gemms_from(const JsonReader& r) {
  const nlohmann::json& list = r.value("gemms");
  if (!list.is_array()) r.fail("gemms", "expected a list of [m, n, k] or [m, n, k, groups]");
  std::vector<GemmShape> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& g = list[i];
    if (!g.is_array() || (g.size() != 3 && g.size() != 4) ||
        !std::all_of(g.begin(), g.end(), [](const nlohmann::json& v) {
          return v.is_number_integer() && v.get<int64_t>() > 0;
        })) {
      r.fail(fmt::format("gemms/{}", i),
             "expected [m, n, k] or [m, n, k, groups], positive integers");
    }
    out.push_back({.m = g[0].get<int64_t>(),
                   .n = g[1].get<int64_t>(),
                   .k = g[2].get<int64_t>(),
                   .groups = g.size() == 4 ? g[3].get<int64_t>() : 1});
  }
  return out;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json units = nlohmann::json::array();
  for (const PlanUnit& u : plan.units) {
    units.push_back(
        {{"id", u.id}, {"name", u.name}, {"parameters", u.parameters}, {"groups", ids(u.groups)}});
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const ParamGroup& g : plan.groups) {
    groups.push_back({{"id", g.id},
                      {"unit", g.unit},
                      {"dtype", dtype_name(g.dtype)},
                      {"requires_grad", g.requires_grad},
                      {"elements", g.elements},
                      {"padded_elements", g.padded_elements},
                      {"shard_elements", g.shard_elements},
                      {"parameters", g.parameters}});
    // Written where true only: a plan without experts reads as before.
    if (g.expert) groups.back()["expert"] = true;
  }
  nlohmann::json segments = nlohmann::json::array();
  for (const PlanSegment& s : plan.segments) {
    segments.push_back({{"id", s.id},
                        {"unit", s.unit},
                        {"label", s.label},
                        {"modules", s.modules},
                        {"forward_flops", s.forward_flops},
                        {"backward_flops", s.backward_flops},
                        {"forward_attention_flops", s.forward_attention_flops},
                        {"backward_attention_flops", s.backward_attention_flops},
                        {"forward_bf16_gemm_flops", s.forward_bf16_gemm_flops},
                        {"backward_bf16_gemm_flops", s.backward_bf16_gemm_flops},
                        {"io_bytes", s.io_bytes},
                        {"recompute_io_bytes", s.recompute_io_bytes},
                        {"recompute_bytes", s.recompute_bytes},
                        {"fp8_cast_forward_bytes", s.fp8_cast_forward_bytes},
                        {"fp8_cast_backward_bytes", s.fp8_cast_backward_bytes},
                        {"gemms", gemms_json(s.gemms)},
                        {"activation_bytes", s.activation_bytes},
                        {"full_activation_bytes", s.full_activation_bytes},
                        {"checkpointed", s.checkpointed},
                        {"workspace_bytes", s.workspace_bytes}});
    // Written where there is host work only: plans of other stacks read as before.
    if (s.forward_host_seconds > 0 || s.backward_host_seconds > 0) {
      segments.back()["forward_host_seconds"] = s.forward_host_seconds;
      segments.back()["backward_host_seconds"] = s.backward_host_seconds;
    }
    if (s.host_sync) segments.back()["host_sync"] = true;
  }
  nlohmann::json buffers = nlohmann::json::array();
  for (const PlanBuffer& b : plan.buffers) {
    nlohmann::json j = {{"id", b.id},
                        {"name", b.name},
                        {"role", buffer_role_name(b.role)},
                        {"unit", b.unit},
                        {"group", b.group},
                        {"micro_batch", b.micro_batch},
                        {"dtype", dtype_name(b.dtype)},
                        {"bytes", b.bytes},
                        {"persistent", b.persistent},
                        {"shard_group", b.shard_group}};
    if (!b.persistent) {
      j["live"] = {b.live_begin, b.live_end};
      j["offset"] = b.offset;
    }
    buffers.push_back(std::move(j));
  }
  nlohmann::json process_groups = nlohmann::json::array();
  for (const ProcessGroup& g : plan.process_groups) {
    process_groups.push_back({{"name", g.name}, {"size", g.size}, {"stride", g.stride}});
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const PlanOp& o : plan.ops) {
    ops.push_back({{"id", o.id},
                   {"name", o.name},
                   {"stream", stream_name(o.stream)},
                   {"kind", op_kind_name(o.kind)},
                   {"unit", o.unit},
                   {"segment", o.segment},
                   {"micro_batch", o.micro_batch},
                   {"bytes", o.bytes},
                   {"flops", o.flops},
                   {"attention_flops", o.attention_flops},
                   {"bf16_gemm_flops", o.bf16_gemm_flops},
                   {"group", o.group},
                   {"deps", ids(o.deps)},
                   {"reads", ids(o.reads)},
                   {"writes", ids(o.writes)}});
    if (o.host_seconds > 0) ops.back()["host_seconds"] = o.host_seconds;
    if (o.host_sync) ops.back()["host_sync"] = true;
  }
  return {{"version", plan.version},
          {"model", plan.model},
          {"cluster", plan.cluster},
          {"num_gpus", plan.num_gpus},
          {"gpus_per_node", plan.gpus_per_node},
          {"non_tensor_bytes", plan.non_tensor_bytes},
          {"capacity_bytes", plan.capacity_bytes},
          {"model_flops", plan.model_flops},
          {"tokens_per_gpu", plan.tokens_per_gpu},
          {"config", fsdp_config_to_json(plan.config)},
          {"process_groups", std::move(process_groups)},
          {"pool",
           {{"algorithm", plan.pool.algorithm},
            {"alignment_bytes", plan.pool.alignment_bytes},
            {"size_bytes", plan.pool.size_bytes},
            {"lower_bound_bytes", plan.pool.lower_bound_bytes}}},
          {"memory", plan_memory_to_json(plan_memory(plan))},
          {"units", std::move(units)},
          {"groups", std::move(groups)},
          {"segments", std::move(segments)},
          {"buffers", std::move(buffers)},
          {"ops", std::move(ops)}};
}

Plan plan_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only({"version", "model", "cluster", "num_gpus", "gpus_per_node", "non_tensor_bytes",
                 "capacity_bytes", "model_flops", "tokens_per_gpu", "config", "process_groups",
                 "pool", "memory", "units", "groups", "segments", "buffers", "ops"});
  Plan plan;
  // Compared before narrowing: 2^32 + 5 is not version 5.
  const int64_t version = r.integer("version");
  if (version != kPlanVersion) {
    r.fail("version",
           fmt::format("plan schema version {} is not the supported {}", version, kPlanVersion));
  }
  plan.version = kPlanVersion;
  plan.model = r.string("model");
  plan.cluster = r.string("cluster");
  plan.num_gpus = r.positive_integer("num_gpus");
  plan.gpus_per_node = r.positive_integer("gpus_per_node");
  plan.non_tensor_bytes = r.integer("non_tensor_bytes");
  plan.capacity_bytes = r.integer("capacity_bytes");
  plan.model_flops = r.non_negative_number("model_flops");
  plan.tokens_per_gpu = r.number_in("tokens_per_gpu", 1e-9, 1e18);
  plan.config = fsdp_config_from_json(r.value("config"), label + " /config");
  if (plan.config.dp_shard == 0) r.fail("config", "dp_shard must be resolved in a plan");
  for (const JsonReader& g : r.objects("process_groups")) {
    g.expect_only({"name", "size", "stride"});
    plan.process_groups.push_back(ProcessGroup{.name = g.string("name"),
                                               .size = g.positive_integer("size"),
                                               .stride = g.positive_integer("stride")});
  }
  const JsonReader pool = r.object("pool");
  pool.expect_only({"algorithm", "alignment_bytes", "size_bytes", "lower_bound_bytes"});
  plan.pool = PoolPlan{.algorithm = pool.string("algorithm"),
                       .alignment_bytes = pool.positive_integer("alignment_bytes"),
                       .size_bytes = pool.integer("size_bytes"),
                       .lower_bound_bytes = pool.integer("lower_bound_bytes")};
  for (const JsonReader& u : r.objects("units")) {
    u.expect_only({"id", "name", "parameters", "groups"});
    plan.units.push_back(PlanUnit{.id = u.integer("id"),
                                  .name = u.string("name"),
                                  .parameters = u.integer("parameters"),
                                  .groups = u.integers("groups")});
  }
  for (const JsonReader& g : r.objects("groups")) {
    g.expect_only({"id", "unit", "dtype", "requires_grad", "elements", "padded_elements",
                   "shard_elements", "parameters", "expert"});
    plan.groups.push_back(
        ParamGroup{.id = g.integer("id"),
                   .unit = g.integer("unit"),
                   .dtype = parse_dtype(g.string("dtype"), label, g.path_of("dtype")),
                   .requires_grad = g.boolean("requires_grad"),
                   .elements = g.integer("elements"),
                   .padded_elements = g.integer("padded_elements"),
                   .shard_elements = g.integer("shard_elements"),
                   .parameters = g.strings("parameters"),
                   .expert = g.boolean_or("expert", false)});
  }
  for (const JsonReader& s : r.objects("segments")) {
    s.expect_only({"id",
                   "unit",
                   "label",
                   "modules",
                   "forward_flops",
                   "backward_flops",
                   "forward_attention_flops",
                   "backward_attention_flops",
                   "forward_bf16_gemm_flops",
                   "backward_bf16_gemm_flops",
                   "io_bytes",
                   "recompute_io_bytes",
                   "recompute_bytes",
                   "fp8_cast_forward_bytes",
                   "fp8_cast_backward_bytes",
                   "gemms",
                   "activation_bytes",
                   "full_activation_bytes",
                   "checkpointed",
                   "workspace_bytes",
                   "forward_host_seconds",
                   "backward_host_seconds",
                   "host_sync"});
    plan.segments.push_back(PlanSegment{
        .id = s.integer("id"),
        .unit = s.integer("unit"),
        .label = s.string("label"),
        .modules = s.strings("modules"),
        .forward_flops = s.non_negative_number("forward_flops"),
        .backward_flops = s.non_negative_number("backward_flops"),
        .forward_attention_flops = s.non_negative_number("forward_attention_flops"),
        .backward_attention_flops = s.non_negative_number("backward_attention_flops"),
        // Optional, as every field added since plan.json version 5.
        .forward_bf16_gemm_flops = s.has("forward_bf16_gemm_flops")
                                       ? s.non_negative_number("forward_bf16_gemm_flops")
                                       : 0.0,
        .backward_bf16_gemm_flops = s.has("backward_bf16_gemm_flops")
                                        ? s.non_negative_number("backward_bf16_gemm_flops")
                                        : 0.0,
        .io_bytes = s.non_negative_number("io_bytes"),
        .recompute_io_bytes =
            s.has("recompute_io_bytes") ? s.non_negative_number("recompute_io_bytes") : 0.0,
        .recompute_bytes =
            s.has("recompute_bytes") ? s.non_negative_number("recompute_bytes") : 0.0,
        .fp8_cast_forward_bytes =
            s.has("fp8_cast_forward_bytes") ? s.non_negative_number("fp8_cast_forward_bytes") : 0.0,
        .fp8_cast_backward_bytes = s.has("fp8_cast_backward_bytes")
                                       ? s.non_negative_number("fp8_cast_backward_bytes")
                                       : 0.0,
        .gemms = gemms_from(s),
        .activation_bytes = s.non_negative_number("activation_bytes"),
        .full_activation_bytes = s.non_negative_number("full_activation_bytes"),
        .checkpointed = s.boolean("checkpointed"),
        // Optional: plans written before it existed held no workspace.
        .workspace_bytes =
            s.has("workspace_bytes") ? s.non_negative_number("workspace_bytes") : 0.0,
        .forward_host_seconds =
            s.has("forward_host_seconds") ? s.non_negative_number("forward_host_seconds") : 0.0,
        .backward_host_seconds =
            s.has("backward_host_seconds") ? s.non_negative_number("backward_host_seconds") : 0.0,
        .host_sync = s.boolean_or("host_sync", false)});
  }
  for (const JsonReader& b : r.objects("buffers")) {
    b.expect_only({"id", "name", "role", "unit", "group", "micro_batch", "dtype", "bytes",
                   "persistent", "shard_group", "live", "offset"});
    PlanBuffer buffer{.id = b.integer("id"),
                      .role = parse_named<BufferRole>(b, "role", parse_buffer_role,
                                                      buffer_role_names, "buffer role"),
                      .unit = b.integer("unit"),
                      .group = b.integer("group"),
                      .micro_batch = b.integer("micro_batch"),
                      .dtype = parse_dtype(b.string("dtype"), label, b.path_of("dtype")),
                      .bytes = b.integer("bytes"),
                      .persistent = b.boolean("persistent"),
                      .shard_group = b.integer("shard_group"),
                      .name = b.string("name")};
    if (!buffer.persistent) {
      const std::vector<int64_t> live = b.integers("live");
      if (live.size() != 2) b.fail("live", "expected [first op, end op)");
      buffer.live_begin = live[0];
      buffer.live_end = live[1];
      buffer.offset = b.integer("offset");
    }
    plan.buffers.push_back(std::move(buffer));
  }
  for (const JsonReader& o : r.objects("ops")) {
    o.expect_only({"id", "name", "stream", "kind", "unit", "segment", "micro_batch", "bytes",
                   "flops", "attention_flops", "bf16_gemm_flops", "group", "deps", "reads",
                   "writes", "host_seconds", "host_sync"});
    plan.ops.push_back(
        PlanOp{.id = o.integer("id"),
               .stream = parse_named<Stream>(o, "stream", parse_stream, stream_names, "stream"),
               .kind = parse_named<OpKind>(o, "kind", parse_op_kind, op_kind_names, "op kind"),
               .unit = o.integer("unit"),
               .segment = o.integer("segment"),
               .micro_batch = o.integer("micro_batch"),
               .name = o.string("name"),
               .bytes = o.non_negative_number("bytes"),
               .flops = o.non_negative_number("flops"),
               .attention_flops = o.non_negative_number("attention_flops"),
               .bf16_gemm_flops =
                   o.has("bf16_gemm_flops") ? o.non_negative_number("bf16_gemm_flops") : 0.0,
               .group = o.integer("group"),
               .deps = o.integers("deps"),
               .reads = o.integers("reads"),
               .writes = o.integers("writes"),
               .host_seconds = o.has("host_seconds") ? o.non_negative_number("host_seconds") : 0.0,
               .host_sync = o.boolean_or("host_sync", false)});
    if (plan.ops.back().attention_flops > plan.ops.back().flops)
      o.fail("attention_flops", "exceeds the op's flops");
    if (plan.ops.back().attention_flops + plan.ops.back().bf16_gemm_flops > plan.ops.back().flops)
      o.fail("bf16_gemm_flops", "with attention_flops exceeds the op's flops");
  }
  return plan;
}

Plan read_plan_file(const std::string& path) {
  Plan plan = plan_from_json(read_json_file(path, limits::kMaxPlanFileBytes), path);
  if (auto error = validate_plan(plan)) {
    throw InputError(path, std::string(plan_error_kind_name(error->kind)),
                     "invalid plan: " + error->message);
  }
  return plan;
}

}  // namespace shardplan
