#include "traces/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"

namespace shardplan {

namespace {

// Length of [a, b) not covered by the sorted, disjoint `busy` intervals.
double uncovered(double a, double b, const std::vector<std::pair<double, double>>& busy) {
  double covered = 0;
  auto it = std::lower_bound(busy.begin(), busy.end(), std::pair{a, -1.0},
                             [](const auto& x, const auto& y) { return x.second <= y.first; });
  for (; it != busy.end() && it->first < b; ++it)
    covered += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
  return std::max(0.0, (b - a) - covered);
}

}  // namespace

namespace {

// The union of `spans`, sorted and disjoint.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& span : spans) {
    if (!out.empty() && span.first <= out.back().second) {
      out.back().second = std::max(out.back().second, span.second);
    } else {
      out.push_back(span);
    }
  }
  return out;
}

// A time or duration of a step, in seconds: finite, non-negative and at most a day.
double step_seconds_of(const JsonReader& r, std::string_view key) {
  const double v = r.number(key);
  if (!(v >= 0 && v <= kMaxStepSeconds)) {
    r.fail(key, fmt::format("{:g} s is not a time within a step: must be in [0, {:g}] (a day; "
                            "no training step is longer)",
                            v, kMaxStepSeconds));
  }
  return v;
}

double optional_step_seconds(const JsonReader& r, std::string_view key) {
  return r.has(key) ? step_seconds_of(r, key) : 0.0;
}

bool is_collective_kind(const std::string& kind) {
  return kind == "all_gather" || kind == "reduce_scatter" || kind == "all_reduce" ||
         kind == "send_recv" || kind == "all_to_all";
}

}  // namespace

bool is_model_parallel_group_name(std::string_view name) {
  return name == "tp" || name == "cp" || name == "ep" || name == "etp" || name == "ep_etp";
}

void summarize_streams(Timeline& t) {
  TimelineSummary& s = t.summary;
  s.compute_seconds = s.exposed_all_gather_seconds = s.exposed_reduce_scatter_seconds =
      s.exposed_outer_seconds = s.exposed_model_parallel_seconds = 0;
  // Busy time is a union: a planned compute stream runs one op at a time, but a measured
  // one may be several GPU streams whose kernels overlap. The compute stream also runs
  // blocking collectives (tensor- and context-parallel ones, reductions without
  // async_reduce): they keep it from computing, so they are not compute time, but FSDP
  // traffic under them is not what holds the stream up either.
  std::vector<std::pair<double, double>> compute_spans, stream_spans, model_parallel_spans;
  double executed_flops = 0;
  for (const TimelineOp& op : t.ops) {
    const bool collective = is_collective_kind(op.kind);
    const bool model_parallel = is_model_parallel_group_name(op.group);
    if (model_parallel && op.end > op.start) model_parallel_spans.emplace_back(op.start, op.end);
    if (op.stream != "compute") continue;
    if (op.end > op.start) {
      stream_spans.emplace_back(op.start, op.end);
      if (!collective) compute_spans.emplace_back(op.start, op.end);
    }
    executed_flops += op.flops;
  }
  const auto compute = merged(std::move(compute_spans));
  const auto stream = merged(std::move(stream_spans));
  for (const auto& [a, b] : compute) s.compute_seconds += b - a;
  for (const auto& [a, b] : merged(std::move(model_parallel_spans)))
    s.exposed_model_parallel_seconds += uncovered(a, b, compute);
  // Other streams ("comm": broadcasts, all-to-all of a measured step) count in no column.
  for (const TimelineOp& op : t.ops) {
    if (op.stream != "ag" && op.stream != "rs" && op.stream != "outer") continue;
    const double exposed = uncovered(op.start, op.end, stream);
    (op.stream == "ag"   ? s.exposed_all_gather_seconds
     : op.stream == "rs" ? s.exposed_reduce_scatter_seconds
                         : s.exposed_outer_seconds) += exposed;
  }
  s.tflops_per_gpu = s.step_seconds > 0 ? executed_flops / s.step_seconds / 1e12 : 0;
}

nlohmann::json timeline_to_json(const Timeline& t) {
  nlohmann::json ops = nlohmann::json::array();
  for (const TimelineOp& o : t.ops) {
    ops.push_back({{"op", o.op},
                   {"name", o.name},
                   {"stream", o.stream},
                   {"kind", o.kind},
                   {"start", o.start},
                   {"end", o.end},
                   {"bytes", o.bytes},
                   {"flops", o.flops}});
    if (!o.group.empty()) ops.back()["group"] = o.group;
  }
  nlohmann::json memory = nlohmann::json::array();
  for (const MemorySample& m : t.memory) memory.push_back({m.time, m.allocated, m.reserved});
  const TimelineSummary& s = t.summary;
  const PathBreakdown& p = s.critical_path;
  return {{"version", kTimelineVersion},
          {"source", t.source},
          {"model", t.model},
          {"cluster", t.cluster},
          {"num_gpus", t.num_gpus},
          {"allocator", t.allocator},
          {"summary",
           {{"step_seconds", s.step_seconds},
            {"tokens_per_second_per_gpu", s.tokens_per_second_per_gpu},
            {"tflops_per_gpu", s.tflops_per_gpu},
            {"mfu", s.mfu},
            {"compute_seconds", s.compute_seconds},
            {"exposed_all_gather_seconds", s.exposed_all_gather_seconds},
            {"exposed_reduce_scatter_seconds", s.exposed_reduce_scatter_seconds},
            {"exposed_outer_seconds", s.exposed_outer_seconds},
            {"exposed_model_parallel_seconds", s.exposed_model_parallel_seconds},
            {"host_wait_seconds", s.host_wait_seconds},
            {"peak_allocated_bytes", s.peak_allocated_bytes},
            {"peak_reserved_bytes", s.peak_reserved_bytes},
            {"capacity_bytes", s.capacity_bytes},
            {"fits", s.fits},
            {"critical_path",
             {{"compute", p.compute},
              {"all_gather", p.all_gather},
              {"reduce_scatter", p.reduce_scatter},
              {"outer", p.outer},
              {"optimizer", p.optimizer},
              {"model_parallel", p.model_parallel},
              {"offload", p.offload},
              {"host", p.host}}}}},
          {"critical_path", t.critical_path},
          {"ops", std::move(ops)},
          {"memory", std::move(memory)}};
}

Timeline timeline_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only({"version", "source", "model", "cluster", "num_gpus", "allocator", "summary",
                 "critical_path", "ops", "memory"});
  if (r.integer("version") != kTimelineVersion) {
    r.fail("version", fmt::format("timeline schema version {} is not the supported {}",
                                  r.integer("version"), kTimelineVersion));
  }
  Timeline t{.source = r.string("source"),
             .model = r.string("model"),
             .cluster = r.string("cluster"),
             .num_gpus = r.integer_in("num_gpus", 1, limits::kMaxGpus),
             .allocator = r.string("allocator"),
             .critical_path = r.integers("critical_path")};
  if (t.source != "predicted" && t.source != "measured" && t.source != "profiled")
    r.fail("source", fmt::format("expected 'predicted', 'measured' or 'profiled', got {}",
                                 quote_input(t.source)));
  const JsonReader s = r.object("summary");
  TimelineSummary& m = t.summary;
  m.step_seconds = step_seconds_of(s, "step_seconds");
  m.tokens_per_second_per_gpu = s.non_negative_number("tokens_per_second_per_gpu");
  m.tflops_per_gpu = s.non_negative_number("tflops_per_gpu");
  m.mfu = s.non_negative_number("mfu");
  m.compute_seconds = step_seconds_of(s, "compute_seconds");
  m.exposed_all_gather_seconds = step_seconds_of(s, "exposed_all_gather_seconds");
  m.exposed_reduce_scatter_seconds = step_seconds_of(s, "exposed_reduce_scatter_seconds");
  m.exposed_outer_seconds = step_seconds_of(s, "exposed_outer_seconds");
  // Absent from timelines written before tensor and context parallelism.
  m.exposed_model_parallel_seconds = optional_step_seconds(s, "exposed_model_parallel_seconds");
  // Absent from timelines written before the host model (2026-11-29).
  m.host_wait_seconds = optional_step_seconds(s, "host_wait_seconds");
  m.peak_allocated_bytes = s.integer_in("peak_allocated_bytes", 0, limits::kMaxPoolBytes);
  m.peak_reserved_bytes = s.integer_in("peak_reserved_bytes", 0, limits::kMaxPoolBytes);
  m.capacity_bytes = s.integer_in("capacity_bytes", 0, limits::kMaxPoolBytes);
  m.fits = s.boolean("fits");
  const JsonReader p = s.object("critical_path");
  m.critical_path = {.compute = step_seconds_of(p, "compute"),
                     .all_gather = step_seconds_of(p, "all_gather"),
                     .reduce_scatter = step_seconds_of(p, "reduce_scatter"),
                     .outer = step_seconds_of(p, "outer"),
                     .optimizer = step_seconds_of(p, "optimizer"),
                     .model_parallel = optional_step_seconds(p, "model_parallel"),
                     // Absent from timelines written before activation offload.
                     .offload = optional_step_seconds(p, "offload"),
                     .host = optional_step_seconds(p, "host")};
  for (const JsonReader& o : r.objects("ops")) {
    o.expect_only({"op", "name", "stream", "kind", "start", "end", "bytes", "flops", "group"});
    TimelineOp op{.op = o.integer("op"),
                  .name = o.string("name"),
                  .stream = o.string("stream"),
                  .kind = o.string("kind"),
                  .start = step_seconds_of(o, "start"),
                  .end = step_seconds_of(o, "end"),
                  .bytes = o.non_negative_number("bytes"),
                  .flops = o.non_negative_number("flops"),
                  .group = o.has("group") ? o.string("group") : std::string()};
    if (op.end < op.start) o.fail("end", "ends before it starts");
    t.ops.push_back(std::move(op));
  }
  const nlohmann::json& memory = r.value("memory");
  if (!memory.is_array()) r.fail("memory", "expected an array of [time, allocated, reserved]");
  for (std::size_t i = 0; i < memory.size(); ++i) {
    const nlohmann::json& row = memory[i];
    // Byte counts are whole numbers in int64 range (a float there, say 1e133, has no
    // int64 value: converting it is undefined behaviour).
    auto bytes_ok = [](const nlohmann::json& v) {
      if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
      return v.is_number_integer() && v.get<int64_t>() >= 0;
    };
    if (!row.is_array() || row.size() != 3 || !row[0].is_number() || !bytes_ok(row[1]) ||
        !bytes_ok(row[2])) {
      r.fail(fmt::format("memory/{}", i),
             "expected [time, allocated, reserved] with whole, non-negative byte counts");
    }
    if (const double time = row[0].get<double>(); !(time >= 0 && time <= kMaxStepSeconds)) {
      r.fail(fmt::format("memory/{}", i),
             fmt::format("time {:g} s is not within a step: must be in [0, {:g}] (a day)", time,
                         kMaxStepSeconds));
    }
    t.memory.push_back({row[0].get<double>(), row[1].get<int64_t>(), row[2].get<int64_t>()});
  }
  return t;
}

nlohmann::json chrome_trace(const Timeline& t) {
  constexpr int kPid = 0;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"pid", kPid},
                    {"name", "process_name"},
                    {"args",
                     {{"name", fmt::format("{} {} on {} ({} GPUs)", t.source, t.model, t.cluster,
                                           t.num_gpus)}}}});
  // Streams in order of first appearance, one thread (track) each.
  std::map<std::string, int> tid;
  for (const TimelineOp& o : t.ops) {
    if (tid.contains(o.stream)) continue;
    const int id = static_cast<int>(tid.size()) + 1;
    tid[o.stream] = id;
    events.push_back({{"ph", "M"},
                      {"pid", kPid},
                      {"tid", id},
                      {"name", "thread_name"},
                      {"args", {{"name", o.stream}}}});
    events.push_back({{"ph", "M"},
                      {"pid", kPid},
                      {"tid", id},
                      {"name", "thread_sort_index"},
                      {"args", {{"sort_index", id}}}});
  }
  for (const TimelineOp& o : t.ops) {
    events.push_back({{"ph", "X"},
                      {"pid", kPid},
                      {"tid", tid[o.stream]},
                      {"name", o.name},
                      {"cat", o.kind},
                      {"ts", o.start * 1e6},
                      {"dur", (o.end - o.start) * 1e6},
                      {"args", {{"op", o.op}, {"bytes", o.bytes}, {"flops", o.flops}}}});
  }
  for (const MemorySample& m : t.memory) {
    events.push_back({{"ph", "C"},
                      {"pid", kPid},
                      {"name", "memory (GiB)"},
                      {"ts", m.time * 1e6},
                      {"args",
                       {{"allocated", static_cast<double>(m.allocated) / 1073741824.0},
                        {"reserved", static_cast<double>(m.reserved) / 1073741824.0}}}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace shardplan
