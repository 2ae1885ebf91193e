#include "traces/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "models/json_reader.h"

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

void summarize_streams(Timeline& t) {
  TimelineSummary& s = t.summary;
  s.compute_seconds = s.exposed_all_gather_seconds = s.exposed_reduce_scatter_seconds =
      s.exposed_outer_seconds = 0;
  // Busy time is the union of the compute ops: a planned compute stream runs one op at a
  // time, but a measured one may be several GPU streams whose kernels overlap.
  std::vector<std::pair<double, double>> spans;
  double executed_flops = 0;
  for (const TimelineOp& op : t.ops) {
    if (op.stream != "compute") continue;
    if (op.end > op.start) spans.emplace_back(op.start, op.end);
    executed_flops += op.flops;
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> busy;
  for (const auto& span : spans) {
    if (!busy.empty() && span.first <= busy.back().second) {
      busy.back().second = std::max(busy.back().second, span.second);
    } else {
      busy.push_back(span);
    }
  }
  for (const auto& [a, b] : busy) s.compute_seconds += b - a;
  // Other streams ("comm": broadcasts, all-to-all of a measured step) count in no column.
  for (const TimelineOp& op : t.ops) {
    if (op.stream != "ag" && op.stream != "rs" && op.stream != "outer") continue;
    const double exposed = uncovered(op.start, op.end, busy);
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
            {"peak_allocated_bytes", s.peak_allocated_bytes},
            {"peak_reserved_bytes", s.peak_reserved_bytes},
            {"capacity_bytes", s.capacity_bytes},
            {"fits", s.fits},
            {"critical_path",
             {{"compute", p.compute},
              {"all_gather", p.all_gather},
              {"reduce_scatter", p.reduce_scatter},
              {"outer", p.outer},
              {"optimizer", p.optimizer}}}}},
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
             .num_gpus = r.positive_integer("num_gpus"),
             .allocator = r.string("allocator"),
             .critical_path = r.integers("critical_path")};
  if (t.source != "predicted" && t.source != "measured" && t.source != "profiled")
    r.fail("source",
           fmt::format("expected 'predicted', 'measured' or 'profiled', got '{}'", t.source));
  const JsonReader s = r.object("summary");
  TimelineSummary& m = t.summary;
  m.step_seconds = s.non_negative_number("step_seconds");
  m.tokens_per_second_per_gpu = s.non_negative_number("tokens_per_second_per_gpu");
  m.tflops_per_gpu = s.non_negative_number("tflops_per_gpu");
  m.mfu = s.non_negative_number("mfu");
  m.compute_seconds = s.non_negative_number("compute_seconds");
  m.exposed_all_gather_seconds = s.non_negative_number("exposed_all_gather_seconds");
  m.exposed_reduce_scatter_seconds = s.non_negative_number("exposed_reduce_scatter_seconds");
  m.exposed_outer_seconds = s.non_negative_number("exposed_outer_seconds");
  m.peak_allocated_bytes = s.integer("peak_allocated_bytes");
  m.peak_reserved_bytes = s.integer("peak_reserved_bytes");
  m.capacity_bytes = s.integer("capacity_bytes");
  m.fits = s.boolean("fits");
  const JsonReader p = s.object("critical_path");
  m.critical_path = {.compute = p.non_negative_number("compute"),
                     .all_gather = p.non_negative_number("all_gather"),
                     .reduce_scatter = p.non_negative_number("reduce_scatter"),
                     .outer = p.non_negative_number("outer"),
                     .optimizer = p.non_negative_number("optimizer")};
  for (const JsonReader& o : r.objects("ops")) {
    o.expect_only({"op", "name", "stream", "kind", "start", "end", "bytes", "flops"});
    TimelineOp op{.op = o.integer("op"),
                  .name = o.string("name"),
                  .stream = o.string("stream"),
                  .kind = o.string("kind"),
                  .start = o.non_negative_number("start"),
                  .end = o.non_negative_number("end"),
                  .bytes = o.non_negative_number("bytes"),
                  .flops = o.non_negative_number("flops")};
    if (op.end < op.start) o.fail("end", "ends before it starts");
    t.ops.push_back(std::move(op));
  }
  const nlohmann::json& memory = r.value("memory");
  if (!memory.is_array()) r.fail("memory", "expected an array of [time, allocated, reserved]");
  for (std::size_t i = 0; i < memory.size(); ++i) {
    const nlohmann::json& row = memory[i];
    if (!row.is_array() || row.size() != 3 || !row[0].is_number() || !row[1].is_number() ||
        !row[2].is_number()) {
      r.fail(fmt::format("memory/{}", i), "expected [time, allocated, reserved]");
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
