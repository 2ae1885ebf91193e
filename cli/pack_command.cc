#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "models/text_format.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "pool/csv.h"
#include "pool/pool.h"

namespace shardplan {
namespace {

std::string_view status_name(PackStatus status) {
  static constexpr NameTable<PackStatus, 3> kNames = {{{PackStatus::solved, "solved"},
                                                       {PackStatus::infeasible, "infeasible"},
                                                       {PackStatus::not_found, "not_found"}}};
  return name_of(kNames, status);
}

}  // namespace

int run_pack(const PackParams& p, std::ostream& out) {
  // The time limit covers the whole command: reading, packing, checking and writing.
  const auto command_start = std::chrono::steady_clock::now();
  const auto assigner = make_offset_assigner(p.algorithm);
  if (!assigner) {
    throw InputError("", "--algorithm",
                     unknown_name_message("algorithm", p.algorithm, offset_assigner_names()));
  }
  if (auto reason = out_of_range_reason(p.alignment, 1, limits::kMaxAlignmentBytes))
    throw InputError("", "--alignment", *reason);
  if (!(p.time_limit_seconds > 0)) {
    throw InputError("", "--time-limit",
                     fmt::format("must be positive, got {}", p.time_limit_seconds));
  }
  if (!(p.time_limit_seconds <= limits::kMaxTimeLimitSeconds)) {
    throw InputError("", "--time-limit",
                     fmt::format("must be at most {:g} seconds (a week), got {}",
                                 limits::kMaxTimeLimitSeconds, p.time_limit_seconds));
  }
  if (p.capacity) {
    if (auto reason = out_of_range_reason(*p.capacity, 1, limits::kMaxPoolBytes))
      throw InputError("", "--capacity", *reason);
  }

  const bool is_plan = p.input.ends_with(".json");
  PoolTable table;
  Plan plan;
  if (is_plan) {
    plan = read_plan_file(p.input);
    table.requests = transient_pool_requests(plan);
  } else {
    table = read_pool_csv(p.input);
  }
  const auto start = std::chrono::steady_clock::now();
  const double spent = std::chrono::duration<double>(start - command_start).count();
  // What checking and writing the result take after the search: reading, checking and
  // writing 113 022 buffers took 0.16 s in all (docs/user-guide.md, pack); room to spare.
  const double reserve =
      0.02 * p.time_limit_seconds + 3e-6 * static_cast<double>(table.requests.size());
  const PackOptions options{
      .alignment = p.alignment,
      .capacity = p.capacity,
      .time_limit_seconds = std::max(0.01, p.time_limit_seconds - spent - reserve)};
  const PoolAssignment result = assigner->assign(table.requests, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t lower_bound = live_bytes_lower_bound(table.requests, p.alignment);
  const bool solved = result.status == PackStatus::solved;
  if (solved) {
    if (auto error =
            check_packing(table.requests, result.offsets, result.size_bytes, p.alignment)) {
      throw std::logic_error(fmt::format("{} produced an invalid placement ({}): {}",
                                         assigner->name(), packing_error_name(error->kind),
                                         error->message));
    }
  }
  if (is_plan && solved) {
    apply_pool_assignment(plan, result, assigner->name(), p.alignment);
    if (auto error = validate_plan(plan)) {
      throw std::logic_error("the re-packed plan does not validate: " + error->message);
    }
  }
  if (!p.output.empty() && solved) {
    write_file_atomically(p.output, is_plan ? json_text(plan_to_json(plan), 1) + "\n"
                                            : format_pool_csv(table, result.offsets));
  }
  const double gap =
      lower_bound > 0
          ? 100.0 *
                (static_cast<double>(result.size_bytes) / static_cast<double>(lower_bound) - 1.0)
          : 0.0;
  if (p.json) {
    nlohmann::json j = {
        {"input", p.input},
        {"algorithm", assigner->name()},
        {"buffers", table.requests.size()},
        {"status", status_name(result.status)},
        {"height", result.size_bytes},
        {"lower_bound", lower_bound},
        {"gap_percent", gap},
        {"proven_optimal", result.proven_optimal},
        {"seconds", seconds},
        {"total_seconds",
         std::chrono::duration<double>(std::chrono::steady_clock::now() - command_start).count()},
        {"nodes", result.nodes},
        {"alignment", p.alignment},
        {"output", solved ? p.output : ""}};
    if (p.capacity) j["capacity"] = *p.capacity;
    out << json_text(j, 2) << "\n";
    return 0;
  }
  out << fmt::format("{}: {} buffers, {}\n", p.input, table.requests.size(), assigner->name());
  if (!solved) {
    out << fmt::format("{}: no placement within capacity {}{}\n", status_name(result.status),
                       *p.capacity,
                       result.status == PackStatus::infeasible ? " exists (proven)"
                                                               : " was found in the time limit");
  } else {
    out << fmt::format("height {} ({}), lower bound {} (+{:.3f} %), {}, {:.3f} s\n",
                       result.size_bytes, format_bytes(static_cast<double>(result.size_bytes)),
                       lower_bound, gap,
                       result.proven_optimal ? "proven optimal" : "not proven optimal", seconds);
    if (!p.output.empty()) out << "wrote " << p.output << "\n";
  }
  return 0;
}

Command add_pack_command(CLI::App& app) {
  auto params = std::make_shared<PackParams>();
  PackParams& p = *params;
  auto* pack =
      app.add_subcommand("pack", "place buffers at pool offsets (MiniMalloc CSV or plan.json)");
  pack->add_option("--input", p.input, "buffer table (id,lower,upper,size CSV) or plan.json")
      ->required()
      ->check(CLI::ExistingFile);
  pack->add_option("--algorithm", p.algorithm, "slots | best-fit | exact | auto")
      ->capture_default_str();
  pack->add_option("--capacity", p.capacity, "the pool may not exceed this many bytes")
      ->check(positive_whole_number());
  pack->add_option("--time-limit", p.time_limit_seconds, "seconds for the exact search")
      ->capture_default_str();
  pack->add_option("--alignment", p.alignment, "offset alignment in bytes")
      ->capture_default_str()
      ->check(positive_whole_number());
  pack->add_option("-o,--output", p.output, "write the placement (CSV with offsets, or plan.json)");
  pack->add_flag("--json", p.json, "machine-readable output");

  return {pack, [params] { return run_pack(*params, std::cout); }};
}

}  // namespace shardplan
