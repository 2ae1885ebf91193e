#include <fmt/format.h>

#include <map>

#include "cli/commands.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "planner/plan_json.h"
#include "traces/trace_import.h"

namespace shardplan {
namespace {

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}

std::string elements_text(int64_t n) {
  return n < 0 ? "?" : format_count(static_cast<double>(n));
}

// Names come from the trace: escaped (printable_message), so a name with control bytes
// cannot garble the terminal, and cut short.
std::string shown(std::string_view name) {
  return printable_message(name, 80);
}

void print_summary(const ImportedTrace& in, std::ostream& out) {
  out << fmt::format("{} ({}): {} of {} profiler step(s); module order from {}\n", in.file,
                     in.format, shown(in.step), in.steps.size(), in.module_source);
  const TimelineSummary& s = in.timeline.summary;
  out << fmt::format(
      "measured step: {} ms on the GPU ({} activities), compute busy {} ms, exposed "
      "all-gather {} ms, exposed reduce-scatter/all-reduce {} ms\n",
      ms(s.step_seconds), in.timeline.ops.size(), ms(s.compute_seconds),
      ms(s.exposed_all_gather_seconds), ms(s.exposed_reduce_scatter_seconds));
  if (!in.timeline.memory.empty()) {
    out << fmt::format("memory: {} samples, peak allocated {}, peak reserved {}\n",
                       in.timeline.memory.size(),
                       format_bytes(static_cast<double>(s.peak_allocated_bytes)),
                       format_bytes(static_cast<double>(s.peak_reserved_bytes)));
  }
  const StepTrace& t = in.trace;
  if (!t.modules.empty()) {
    out << fmt::format("\n{} traced modules, {} micro-batch(es), recompute {}:\n", t.modules.size(),
                       t.grad_accum, recompute_name(t.recompute));
    std::vector<std::vector<std::string>> rows;
    for (std::size_t m = 0; m < t.modules.size(); ++m) {
      const ModuleTime& mt = in.module_times[m];
      rows.push_back({t.modules[m].empty() ? "<root>" : shown(t.modules[m]), ms(mt.forward_seconds),
                      ms(mt.backward_seconds), t.checkpointed[m] ? ms(mt.recompute_seconds) : "-",
                      std::to_string(mt.kernels)});
    }
    out << render_table({"module", "forward (ms)", "backward (ms)", "recompute (ms)", "kernels"},
                        rows, {1, 2, 3, 4});
  }
  if (!in.collectives.empty()) {
    struct Group {
      int64_t count = 0;
      double seconds = 0;
      std::map<int64_t, int64_t> sizes;  // elements -> count
      std::string dtype;
      int64_t group_size = -1;
    };
    std::map<std::string, Group> groups;
    for (const ImportedCollective& c : in.collectives) {
      Group& g = groups[c.kind];
      ++g.count;
      g.seconds += c.duration_seconds;
      ++g.sizes[std::max(c.in_elements, c.out_elements)];
      if (!c.dtype.empty()) g.dtype = c.dtype;
      g.group_size = std::max(g.group_size, c.group_size);
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& [kind, g] : groups) {
      std::string sizes;
      for (const auto& [n, k] : g.sizes)
        sizes += fmt::format("{}{}{}", sizes.empty() ? "" : ", ", elements_text(n),
                             k > 1 ? fmt::format(" ×{}", k) : "");
      rows.push_back({kind, std::to_string(g.count),
                      g.group_size < 0 ? "?" : std::to_string(g.group_size),
                      g.dtype.empty() ? "?" : shown(g.dtype), ms(g.seconds), sizes});
    }
    out << "\ncollectives in the step:\n"
        << render_table({"kind", "count", "ranks", "dtype", "GPU time (ms)", "elements"}, rows,
                        {1, 2, 4});
  }
  for (const std::string& w : in.warnings) out << "warning: " << printable_message(w) << "\n";
}

}  // namespace

int run_trace_import(const TraceImportParams& p, std::ostream& out) {
  check_distinct_outputs({{"-o", p.output}, {"--timeline", p.timeline}});
  const ImportOptions options{.step = p.step, .depth = p.depth};
  const ImportedTrace imported = make_trace_importer(p.format, p.input)->import(p.input, options);
  // Both files are ready before either is written.
  const nlohmann::json step = imported_trace_to_json(imported);
  const std::string step_text = json_text(step, 1) + "\n";
  const std::string timeline_text = json_text(timeline_to_json(imported.timeline), 1) + "\n";
  if (!p.output.empty()) write_file_atomically(p.output, step_text);
  if (!p.timeline.empty()) write_file_atomically(p.timeline, timeline_text);
  if (p.json) {
    out << json_text(step, 2) << "\n";
  } else {
    print_summary(imported, out);
  }
  return 0;
}

Command add_trace_command(CLI::App& app) {
  auto params = std::make_shared<TraceImportParams>();
  TraceImportParams& p = *params;
  auto* trace = app.add_subcommand("trace", "read profiler traces (trace import)");
  trace->require_subcommand(1);
  auto* trace_import = trace->add_subcommand(
      "import", "a PyTorch profiler (Kineto) trace: module order, collectives, measured step");
  trace_import->add_option("trace", p.input, "Chrome-trace JSON, gzipped or not")
      ->required()
      ->check(CLI::ExistingFile);
  trace_import->add_option("-o,--output", p.output,
                           "write the imported step (step trace, module times, collectives)");
  trace_import->add_option("--timeline", p.timeline,
                           "write the measured step as timeline.json (for compare)");
  trace_import->add_option("--step", p.step,
                           "profiler step to import: K or ProfilerStep#K (default: the last)");
  trace_import
      ->add_option("--depth", p.depth, "module levels below the first branching level to trace")
      ->capture_default_str()
      ->check(non_negative_whole_number());
  trace_import->add_option("--format", p.format, "kineto | auto")->capture_default_str();
  trace_import->add_flag("--json", p.json, "machine-readable output");

  return {trace, [params] { return run_trace_import(*params, std::cout); }};
}

}  // namespace shardplan
