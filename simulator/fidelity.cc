#include "simulator/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "models/atomic_file.h"
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

// YYYY-MM-DD with a month 01–12 and a day 01–31.
bool is_iso_date(const std::string& s) {
  const auto digits = [&](std::size_t at, std::size_t n) {
    return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(at),
                       s.begin() + static_cast<std::ptrdiff_t>(at + n),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  if (s.size() != 10 || s[4] != '-' || s[7] != '-' || !digits(0, 4) || !digits(5, 2) ||
      !digits(8, 2))
    return false;
  const int month = std::stoi(s.substr(5, 2)), day = std::stoi(s.substr(8, 2));
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

PublishedRun read_run(const JsonReader& r) {
  r.expect_only({"id", "source", "url", "stack", "gpu", "model", "cluster", "gpus", "config",
                 "measured", "first_look", "note"});
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
  if (r.json().contains("first_look")) {
    if (r.json().at("first_look").is_null()) {
      run.first_look_state = FirstLookState::not_recorded;
    } else {
      const JsonReader f = r.object("first_look");
      f.expect_only({"tokens_per_second_per_gpu", "memory_gib", "fits", "commit", "date"});
      run.first_look_state = FirstLookState::recorded;
      run.first_look.tokens_per_second_per_gpu = f.number_in("tokens_per_second_per_gpu", 0, 1e12);
      run.first_look.memory_gib = f.number_in("memory_gib", -1e6, 1e6);
      run.first_look.fits = f.boolean("fits");
      run.first_look.commit = f.string("commit");
      const std::string& commit = run.first_look.commit;
      if (commit.size() < 7 || commit.size() > 40 ||
          !std::all_of(commit.begin(), commit.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
        f.fail("commit", "must be a commit hash (7 to 40 hex digits)");
      run.first_look.date = f.string("date");
      if (!is_iso_date(run.first_look.date)) f.fail("date", "must be a date as YYYY-MM-DD");
    }
  }
  return run;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The errors of the rows that have one.
template <typename Get>
std::vector<double> errors_of(const std::vector<FidelityRow>& rows, Get get) {
  std::vector<double> errors;
  for (const FidelityRow& r : rows) {
    const std::optional<double> e = get(r);
    if (e) errors.push_back(*e);
  }
  return errors;
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
    const Plan plan = build_plan(run.model, run.cluster, run.config);
    const Timeline t = simulate(plan, run.cluster);
    FidelityRow row;
    row.run = &run;
    row.label = describe_config(run.config);
    row.predicted_tokens_per_second_per_gpu = t.summary.tokens_per_second_per_gpu;
    row.predicted_mfu = t.summary.mfu;
    row.fits = t.summary.fits;
    // The simulator's peaks count the plan's non-tensor bytes (CUDA context, workspaces,
    // the communicators' NCCL buffers); PyTorch's max_memory_reserved and
    // max_memory_allocated do not, nvidia-smi does.
    double bytes = static_cast<double>(run.memory_kind == MeasuredMemory::allocated
                                           ? t.summary.peak_allocated_bytes
                                           : t.summary.peak_reserved_bytes);
    if (run.memory_kind != MeasuredMemory::device)
      bytes -= static_cast<double>(plan.non_tensor_bytes);
    row.predicted_memory_gib = bytes / kGiB;
    row.tokens_error = row.predicted_tokens_per_second_per_gpu / run.tokens_per_second_per_gpu - 1;
    if (run.memory_gib) row.memory_error = row.predicted_memory_gib / *run.memory_gib - 1;
    if (run.first_look_state == FirstLookState::recorded) {
      row.first_look_tokens_error =
          run.first_look.tokens_per_second_per_gpu / run.tokens_per_second_per_gpu - 1;
      if (run.memory_gib)
        row.first_look_memory_error = run.first_look.memory_gib / *run.memory_gib - 1;
    }
    rows.push_back(row);
  }
  return rows;
}

ErrorStats error_stats(std::vector<double> errors) {
  ErrorStats s;
  s.count = static_cast<int64_t>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs(errors.size());
  std::transform(errors.begin(), errors.end(), abs.begin(), [](double e) { return std::abs(e); });
  s.median_abs = median_of(abs);
  s.median = median_of(errors);
  s.worst = *std::max_element(errors.begin(), errors.end(),
                              [](double a, double b) { return std::abs(a) < std::abs(b); });
  s.over = std::count_if(errors.begin(), errors.end(), [](double e) { return e > 0; });
  s.under = std::count_if(errors.begin(), errors.end(), [](double e) { return e < 0; });
  return s;
}

ErrorStats tokens_error_stats(const std::vector<FidelityRow>& rows) {
  return error_stats(
      errors_of(rows, [](const FidelityRow& r) { return std::optional(r.tokens_error); }));
}

ErrorStats memory_error_stats(const std::vector<FidelityRow>& rows) {
  return error_stats(errors_of(rows, [](const FidelityRow& r) { return r.memory_error; }));
}

ErrorStats first_look_tokens_error_stats(const std::vector<FidelityRow>& rows) {
  return error_stats(
      errors_of(rows, [](const FidelityRow& r) { return r.first_look_tokens_error; }));
}

ErrorStats first_look_memory_error_stats(const std::vector<FidelityRow>& rows) {
  return error_stats(
      errors_of(rows, [](const FidelityRow& r) { return r.first_look_memory_error; }));
}

namespace {

// The rows whose memory was read as nvidia-smi shows it (device), or as PyTorch counts it.
std::vector<FidelityRow> rows_reading(const std::vector<FidelityRow>& rows, bool device) {
  std::vector<FidelityRow> out;
  for (const FidelityRow& r : rows)
    if ((r.run->memory_kind == MeasuredMemory::device) == device) out.push_back(r);
  return out;
}

}  // namespace

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

  std::set<std::string> gpus;
  for (const FidelityRow& r : rows) gpus.insert(r.run->gpu);
  const auto stats_row = [](const std::string& figure, const ErrorStats& s,
                            const std::string& target) {
    if (s.count == 0) return fmt::format("| {} | 0 | — | — | — | — | {} |\n", figure, target);
    return fmt::format("| {} | {} | {:.1f} % | {} | {} / {} | {} | {} |\n", figure, s.count,
                       100.0 * s.median_abs, percent(s.median), s.over, s.under, percent(s.worst),
                       target);
  };
  const std::string tokens_target = "median ≤ 10 %, signed median within ±5 %, none above +40 %";
  const std::string memory_target = "median ≤ 8 %";
  int64_t not_recorded = 0;
  for (const FidelityRow& r : rows)
    not_recorded += r.run->first_look_state != FirstLookState::recorded ? 1 : 0;
  md += "## Summary\n\n";
  md +=
      "The first look is each run's prediction when it was added, before any change was made "
      "for it: that, not the error after changes, is how the next user's job will be "
      "predicted. Today is what this commit predicts.\n\n";
  md +=
      "| figure | runs | median \\|error\\| | signed median | over / under | worst error | "
      "target |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  md +=
      stats_row("tokens/s per GPU, first look", first_look_tokens_error_stats(rows), tokens_target);
  const std::vector<FidelityRow> torch_memory = rows_reading(rows, false);
  const std::vector<FidelityRow> device_memory = rows_reading(rows, true);
  md += stats_row("peak memory as PyTorch counts it, first look",
                  first_look_memory_error_stats(torch_memory), memory_target);
  md += stats_row("device memory (nvidia-smi), first look",
                  first_look_memory_error_stats(device_memory), memory_target);
  md += stats_row("tokens/s per GPU, today", tokens_error_stats(rows), tokens_target);
  md += stats_row("peak memory as PyTorch counts it, today", memory_error_stats(torch_memory),
                  memory_target);
  md += stats_row("device memory (nvidia-smi), today", memory_error_stats(device_memory),
                  memory_target);
  md += fmt::format(
      "\n{} runs on {} GPU types; {} of them were added before first looks were recorded "
      "(2026-11-28) and have none.\n\n",
      rows.size(), gpus.size(), not_recorded);

  const auto group_table = [&](const std::string& title, const std::string& column,
                               const auto& key_of) {
    std::set<std::string> keys;
    for (const FidelityRow& r : rows) keys.insert(key_of(r));
    std::string t = fmt::format(
        "### By {}\n\n| {} | runs | tokens/s median \\|error\\| today | worst | first looks | "
        "first-look median \\|error\\| | worst |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        title, column);
    for (const std::string& key : keys) {
      std::vector<FidelityRow> of;
      for (const FidelityRow& r : rows) {
        if (key_of(r) == key) of.push_back(r);
      }
      const ErrorStats s = tokens_error_stats(of);
      const ErrorStats f = first_look_tokens_error_stats(of);
      t += fmt::format("| {} | {} | {:.1f} % | {} | {} | {} | {} |\n", cell(key), s.count,
                       100.0 * s.median_abs, percent(s.worst), f.count,
                       f.count ? fmt::format("{:.1f} %", 100.0 * f.median_abs) : "—",
                       f.count ? percent(f.worst) : "—");
    }
    return t + "\n";
  };
  md += group_table("GPU", "GPU", [](const FidelityRow& r) { return r.run->gpu; });
  md += group_table("model kind", "kind", [](const FidelityRow& r) {
    return std::string(r.run->model.family == "moe" ? "mixture of experts" : "dense");
  });

  md +=
      "\n## Runs\n\n"
      "| run | GPU, stack | shardplan config | measured tok/s/GPU | predicted (MFU) | error | "
      "first look (commit) | measured memory GiB | predicted | error | first look |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
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
    std::string first_tokens = "—", first_memory = "—";
    if (run.first_look_state == FirstLookState::recorded) {
      first_tokens = fmt::format("{:.0f} ({}) `{}`", run.first_look.tokens_per_second_per_gpu,
                                 percent(*r.first_look_tokens_error), run.first_look.commit);
      first_memory = fmt::format("{:.1f}", run.first_look.memory_gib);
      if (r.first_look_memory_error)
        first_memory += fmt::format(" ({})", percent(*r.first_look_memory_error));
      if (!run.first_look.fits) first_memory += " (does not fit)";
    }
    md += fmt::format(
        "| `{}` | {} × {}, {} | {} {} {} | {:.0f} | {:.0f} ({:.1f} %) | {} | {} | {} | {} | {} | "
        "{} "
        "|\n",
        run.id, run.cluster.num_gpus, cell(run.gpu), cell(run.stack), run.model.name, cell(r.label),
        fmt::format("seq {}", run.config.seq_len), run.tokens_per_second_per_gpu,
        r.predicted_tokens_per_second_per_gpu, 100.0 * r.predicted_mfu, percent(r.tokens_error),
        first_tokens, measured_memory, predicted_memory, memory_error, first_memory);
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

std::vector<std::string> record_first_looks(const std::string& runs_file, const std::string& commit,
                                            const std::string& date) {
  const std::vector<PublishedRun> runs = load_published_runs(runs_file);
  std::vector<PublishedRun> missing;
  for (const PublishedRun& run : runs) {
    if (run.first_look_state == FirstLookState::missing) missing.push_back(run);
  }
  std::vector<std::string> ids;
  if (missing.empty()) return ids;
  const std::vector<FidelityRow> rows = evaluate_published_runs(missing);
  // ordered_json keeps the file's key order: the rewrite changes only the added fields.
  nlohmann::ordered_json file = nlohmann::ordered_json::parse(read_text_file(runs_file));
  for (nlohmann::ordered_json& run : file["runs"]) {
    if (run.contains("first_look")) continue;
    const std::string id = run["id"].get<std::string>();
    const auto row = std::find_if(rows.begin(), rows.end(),
                                  [&](const FidelityRow& r) { return r.run->id == id; });
    nlohmann::ordered_json look;
    look["tokens_per_second_per_gpu"] =
        std::round(row->predicted_tokens_per_second_per_gpu * 10.0) / 10.0;
    look["memory_gib"] = std::round(row->predicted_memory_gib * 100.0) / 100.0;
    look["fits"] = row->fits;
    look["commit"] = commit;
    look["date"] = date;
    nlohmann::ordered_json rebuilt;
    for (auto it = run.begin(); it != run.end(); ++it) {
      rebuilt[it.key()] = it.value();
      if (it.key() == "measured") rebuilt["first_look"] = look;
    }
    run = rebuilt;
    ids.push_back(id);
  }
  write_file_atomically(runs_file, file.dump(1, ' ', false) + "\n");
  return ids;
}

}  // namespace shardplan
