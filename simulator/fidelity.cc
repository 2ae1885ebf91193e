#include "simulator/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/sweep.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

constexpr NameTable<MeasuredMemory, 3> kMemoryKinds = {{{MeasuredMemory::reserved, "reserved"},
                                                        {MeasuredMemory::allocated, "allocated"},
                                                        {MeasuredMemory::device, "device"}}};

// A model or cluster named by the run: a zoo name, or a file relative to the runs file.
std::string resolve_reference(const std::string& name, const std::string& runs_file) {
  const bool looks_like_path = name.find('/') != std::string::npos || name.ends_with(".json");
  if (!looks_like_path) return name;
  const std::filesystem::path p(name);
  if (p.is_absolute()) return name;
  return (std::filesystem::path(runs_file).parent_path() / p).string();
}

// Zoo lookups report a flag ("--model"); inside a runs file the error belongs to the field.
template <typename Load>
auto load_named(const JsonReader& r, std::string_view key, Load load) {
  try {
    return load(resolve_reference(r.string(key), r.file()));
  } catch (const InputError& e) {
    if (!e.file().empty()) throw;
    r.fail(key, e.reason());
  }
}

PublishedRun read_run(const JsonReader& r) {
  r.expect_only({"id", "source", "url", "stack", "gpu", "model", "cluster", "gpus", "config",
                 "measured", "note"});
  PublishedRun run;
  run.id = r.string("id");
  run.source = r.string("source");
  run.url = r.string_or("url", "");
  run.stack = r.string("stack");
  run.gpu = r.string("gpu");
  run.note = r.string_or("note", "");
  run.model = load_named(r, "model", [](const std::string& n) { return load_model(n); });
  const int64_t gpus = r.positive_integer("gpus");
  run.cluster = load_named(
      r, "cluster", [&](const std::string& n) { return load_cluster(n, std::nullopt, gpus); });
  const std::string config_label = r.file() + " " + r.path_of("config");
  const FsdpConfig config =
      r.has("config") ? fsdp_config_from_json(r.value("config"), config_label) : FsdpConfig{};
  run.config = resolve_fsdp_config(config, run.model, run.cluster, config_label);

  const JsonReader m = r.object("measured");
  m.expect_only({"tokens_per_second_per_gpu", "memory_gib", "memory_kind"});
  run.tokens_per_second_per_gpu = m.number_in("tokens_per_second_per_gpu", 1e-9, 1e12);
  if (m.has("memory_gib")) run.memory_gib = m.number_in("memory_gib", 1e-9, 1e6);
  if (m.has("memory_kind")) {
    if (!run.memory_gib) m.fail("memory_kind", "given without memory_gib");
    const std::string kind = m.string("memory_kind");
    const std::optional<MeasuredMemory> parsed = value_of(kMemoryKinds, kind);
    if (!parsed) {
      m.fail("memory_kind", unknown_name_message("memory kind", kind, names_of(kMemoryKinds)));
    }
    run.memory_kind = *parsed;
  }
  return run;
}

ErrorStats stats(std::vector<double> errors) {
  ErrorStats s;
  s.count = static_cast<int64_t>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs(errors.size());
  std::transform(errors.begin(), errors.end(), abs.begin(), [](double e) { return std::abs(e); });
  std::sort(abs.begin(), abs.end());
  const std::size_t n = abs.size();
  s.median_abs = n % 2 == 1 ? abs[n / 2] : 0.5 * (abs[n / 2 - 1] + abs[n / 2]);
  s.worst = *std::max_element(errors.begin(), errors.end(),
                              [](double a, double b) { return std::abs(a) < std::abs(b); });
  return s;
}

std::string percent(double error) {
  return fmt::format("{:+.0f} %", 100.0 * error);
}

// Markdown table cells must not break the row.
std::string cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

}  // namespace

std::vector<PublishedRun> load_published_runs(const std::string& path) {
  const nlohmann::json json = read_json_file(path);
  const JsonReader r(json, path);
  r.expect_only({"version", "runs"});
  if (r.integer("version") != 1) r.fail("version", "must be 1");
  std::vector<PublishedRun> runs;
  std::set<std::string> ids;
  for (const JsonReader& run : r.objects("runs")) {
    runs.push_back(read_run(run));
    if (!ids.insert(runs.back().id).second) run.fail("id", "repeats an earlier run's id");
  }
  if (runs.empty()) r.fail("runs", "must list at least one run");
  return runs;
}

std::vector<FidelityRow> evaluate_published_runs(const std::vector<PublishedRun>& runs) {
  std::vector<FidelityRow> rows;
  for (const PublishedRun& run : runs) {
    const Timeline t = simulate(build_plan(run.model, run.cluster, run.config), run.cluster);
    FidelityRow row;
    row.run = &run;
    row.label = describe_config(run.config);
    row.predicted_tokens_per_second_per_gpu = t.summary.tokens_per_second_per_gpu;
    row.predicted_mfu = t.summary.mfu;
    row.fits = t.summary.fits;
    // The simulator's peaks count the cluster's non-tensor bytes (CUDA context, NCCL,
    // cuBLAS); PyTorch's max_memory_reserved and max_memory_allocated do not, nvidia-smi
    // does.
    double bytes = static_cast<double>(run.memory_kind == MeasuredMemory::allocated
                                           ? t.summary.peak_allocated_bytes
                                           : t.summary.peak_reserved_bytes);
    if (run.memory_kind != MeasuredMemory::device)
      bytes -= static_cast<double>(run.cluster.non_tensor_bytes);
    row.predicted_memory_gib = bytes / kGiB;
    row.tokens_error = row.predicted_tokens_per_second_per_gpu / run.tokens_per_second_per_gpu - 1;
    if (run.memory_gib) row.memory_error = row.predicted_memory_gib / *run.memory_gib - 1;
    rows.push_back(row);
  }
  return rows;
}

ErrorStats tokens_error_stats(const std::vector<FidelityRow>& rows) {
  std::vector<double> errors;
  for (const FidelityRow& r : rows) errors.push_back(r.tokens_error);
  return stats(errors);
}

ErrorStats memory_error_stats(const std::vector<FidelityRow>& rows) {
  std::vector<double> errors;
  for (const FidelityRow& r : rows) {
    if (r.memory_error) errors.push_back(*r.memory_error);
  }
  return stats(errors);
}

std::string fidelity_markdown(const std::vector<FidelityRow>& rows, const std::string& runs_file) {
  std::string md =
      "# Fidelity: published runs against the simulator\n\n"
      "<!-- Generated by tests/simulator/fidelity_test.cc from " +
      runs_file +
      "; do not edit. Regenerate: SHARDPLAN_WRITE_FIDELITY=1 ctest -R Fidelity -->\n\n"
      "Every published training run shardplan is held against, none used to set a "
      "constant. Each row is simulated with the model, cluster and config written in `" +
      runs_file +
      "` (`shardplan simulate` with the same settings gives the same figures). Error is "
      "predicted ÷ measured − 1. Memory compares like with like: the caching allocator's "
      "peak reserved bytes with PyTorch's `max_memory_reserved`, peak allocated with "
      "`max_memory_allocated`, reserved plus the cluster's non-tensor bytes with what "
      "`nvidia-smi` shows.\n\n";

  const ErrorStats tokens = tokens_error_stats(rows);
  const ErrorStats memory = memory_error_stats(rows);
  std::set<std::string> gpus;
  for (const FidelityRow& r : rows) gpus.insert(r.run->gpu);
  md += "## Summary\n\n";
  md +=
      "| figure | runs | median \\|error\\| | worst error | target |\n| --- | --- | --- | --- | "
      "--- |\n";
  md += fmt::format(
      "| tokens/s per GPU | {} | {:.1f} % | {} | median ≤ 10 %, none worse than 25 % |\n",
      tokens.count, 100.0 * tokens.median_abs, percent(tokens.worst));
  md += fmt::format("| peak memory | {} | {:.1f} % | {} | median ≤ 5 % |\n\n", memory.count,
                    100.0 * memory.median_abs, percent(memory.worst));
  md += fmt::format("{} runs on {} GPU types.\n\n", rows.size(), gpus.size());

  md +=
      "### By GPU\n\n| GPU | runs | tokens/s median \\|error\\| | worst |\n| --- | --- | --- | --- "
      "|\n";
  for (const std::string& gpu : gpus) {
    std::vector<FidelityRow> of;
    for (const FidelityRow& r : rows) {
      if (r.run->gpu == gpu) of.push_back(r);
    }
    const ErrorStats s = tokens_error_stats(of);
    md += fmt::format("| {} | {} | {:.1f} % | {} |\n", cell(gpu), s.count, 100.0 * s.median_abs,
                      percent(s.worst));
  }

  md +=
      "\n## Runs\n\n"
      "| run | GPU, stack | shardplan config | measured tok/s/GPU | predicted (MFU) | error | "
      "measured memory GiB | predicted | error |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const FidelityRow& r : rows) {
    const PublishedRun& run = *r.run;
    std::string measured_memory = "—",
                predicted_memory = fmt::format("{:.1f}", r.predicted_memory_gib),
                memory_error = "—";
    if (run.memory_gib) {
      measured_memory =
          fmt::format("{:.1f} ({})", *run.memory_gib, name_of(kMemoryKinds, run.memory_kind));
      memory_error = percent(*r.memory_error);
    }
    if (!r.fits) predicted_memory += " (does not fit)";
    md += fmt::format(
        "| `{}` | {} × {}, {} | {} {} {} | {:.0f} | {:.0f} ({:.1f} %) | {} | {} | {} | {} |\n",
        run.id, run.cluster.num_gpus, cell(run.gpu), cell(run.stack), run.model.name, cell(r.label),
        fmt::format("seq {}", run.config.seq_len), run.tokens_per_second_per_gpu,
        r.predicted_tokens_per_second_per_gpu, 100.0 * r.predicted_mfu, percent(r.tokens_error),
        measured_memory, predicted_memory, memory_error);
  }

  md += "\n## Sources\n\n";
  for (const FidelityRow& r : rows) {
    const PublishedRun& run = *r.run;
    md += fmt::format("- `{}`: {}", run.id, run.source);
    if (!run.url.empty()) md += fmt::format(" <{}>", run.url);
    if (!run.note.empty()) md += ". " + run.note;
    md += "\n";
  }
  return md;
}

}  // namespace shardplan
