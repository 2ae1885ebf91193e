#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/mpi_session.h"
#include "cli/options.h"
#include "executor/cpu_backend.h"
#include "executor/cuda_backend.h"
#include "executor/cuda_probe.h"
#include "executor/replay.h"
#include "executor/watchdog.h"
#include "models/atomic_file.h"
#include "models/cluster_spec.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/text_format.h"
#include "planner/plan_json.h"
#include "planner/sweep.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

// The measured step's MFU, or why there is none: a CUDA replay's step on the GPU the plan
// was made for (its built-in cluster's dense BF16 peak, as simulate); the CPU backend's
// step runs shrunk matmuls on CPUs, which no GPU peak measures.
struct MeasuredMfu {
  std::optional<double> value;
  std::string note;
};
MeasuredMfu measured_mfu(const Plan& plan, const Timeline& t, const std::string& backend) {
  if (backend != "cuda") {
    return {std::nullopt,
            "the CPU backend runs each compute op's matmuls shrunk by --compute-scale on CPUs: "
            "its step is no GPU's"};
  }
  const std::vector<std::string> names = cluster_zoo_names();
  if (std::find(names.begin(), names.end(), plan.cluster) == names.end()) {
    return {std::nullopt,
            fmt::format("the plan's cluster {} is not built in, so its GPU's peak is unknown",
                        quote_input(plan.cluster))};
  }
  const ClusterSpec cluster = load_cluster(plan.cluster, std::nullopt, plan.num_gpus);
  return {model_flops_utilization(plan, t.summary.step_seconds, cluster),
          fmt::format("model FLOPs ÷ {}'s dense BF16 peak", cluster.gpu.name)};
}

// The flags and the plan, which every rank reads and checks alike.
struct ExecuteInputs {
  Plan plan;
  ReplayOptions options;
};
ExecuteInputs read_inputs(const ExecuteParams& p) {
  if (p.backend != "cpu" && p.backend != "cuda")
    throw InputError("", "--backend",
                     fmt::format("expected cpu or cuda, got {}", quote_input(p.backend)));
  // A million steps of the smallest plan already take hours; more is a typo.
  constexpr int64_t kMaxSteps = 1'000'000;
  if (auto reason = out_of_range_reason(p.warmup, 0, kMaxSteps))
    throw InputError("", "--warmup", *reason);
  if (auto reason = out_of_range_reason(p.steps, 1, kMaxSteps))
    throw InputError("", "--steps", *reason);
  if (!(p.compute_scale > 0 && p.compute_scale <= 1))
    throw InputError("", "--compute-scale", "must be in (0, 1]");
  if (!(p.timeout_seconds > 0 && p.timeout_seconds <= limits::kMaxTimeLimitSeconds))
    throw InputError("", "--timeout",
                     fmt::format("must be in (0, {}] seconds", limits::kMaxTimeLimitSeconds));
  return {read_plan_file(p.plan),
          {.warmup = p.warmup,
           .steps = p.steps,
           .compute_scale = p.compute_scale,
           .check = !p.no_check && p.backend == "cpu",
           .timeout_seconds = p.timeout_seconds}};
}

// The ranks' wait for each other, bounded like the replay (rank 0 of 2 waited in MPI_Init
// forever for a rank stopped before it started MPI). --timeout is not checked yet when MPI
// starts: an invalid one waits the default 600 s, and read_inputs says why it is invalid.
double wait_limit_seconds(const ExecuteParams& p) {
  if (!(p.timeout_seconds > 0 && p.timeout_seconds <= limits::kMaxTimeLimitSeconds)) return 600;
  return std::max(p.timeout_seconds, 1.0);
}

// MPI's start and end are collectives too: Open MPI's MPI_Init and MPI_Finalize each wait
// in a PMIx fence for every rank. A rank that never arrives ends the job as the replay's
// watchdog would, naming what this rank waited in.
Watchdog mpi_wait_watchdog(const ExecuteParams& p, const std::string& what) {
  return Watchdog(wait_limit_seconds(p),
                  fmt::format("rank {} of {}", launcher_rank(), launcher_size()),
                  [what](int, int64_t) {
                    return what + ", which waits for every rank: another rank died or hangs";
                  });
}

int execute_ranks(const ExecuteParams& p, bool with_mpi, std::ostream& out, std::ostream& err);

}  // namespace

int run_execute(const ExecuteParams& p, std::ostream& out, std::ostream& err) {
  // The CUDA backend runs one rank without a launcher; under mpirun or srun, MPI.
  std::optional<MpiSession> mpi;
  if (p.backend == "cpu" || launched_by_mpi()) {
    const Watchdog starting = mpi_wait_watchdog(p, "MPI's start (MPI_Init)");
    mpi.emplace();
  }
  const int code = execute_ranks(p, mpi.has_value(), out, err);
  if (mpi) {
    const Watchdog ending = mpi_wait_watchdog(p, "MPI's end (MPI_Finalize)");
    mpi.reset();
  }
  return code;
}

namespace {

int execute_ranks(const ExecuteParams& p, bool with_mpi, std::ostream& out, std::ostream& err) {
  // From here on, whatever stops one rank must stop them all: the others wait for it in
  // a collective (or in NCCL's communicator setup), and MPI_Finalize would wait for them.
  // Each rank that fails alone says so, with its rank; the first MPI_Abort ends the job.
  int rank = 0, ranks = 1;
  if (with_mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  const std::string who = ranks > 1 ? fmt::format(" (rank {})", rank) : std::string();
  auto abort = [&](int code) {
    if (with_mpi) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  };
  // What every rank reads and checks (a flag, the plan, whether it can be replayed here):
  // the ranks agree whether any refused it before going on, so none waits in a collective
  // for one that stopped (a plan missing on one node hung the job until the watchdog). The
  // lowest refusing rank alone says why (with its rank when not 0), the others wait until
  // it has (a rank that exits first makes mpirun end the one still printing); then every
  // rank returns 1 and MPI finalizes, with no MPI_Abort and its notices. Alone, the error
  // goes to main() like any command's.
  auto agree = [&](const std::optional<InputError>& refused) {
    if (ranks == 1) {
      if (refused) throw *refused;
      return false;
    }
    int candidate = refused ? rank : ranks;
    int first = ranks;
    // Bounded by --timeout as the replay is: a rank stopped before it agrees (a hung
    // node) must not hang the others here, where no watchdog runs yet.
    MPI_Request request;
    MPI_Iallreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_limit_seconds(p));
    for (int done = 0; !done;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        err << fmt::format(
                   "shardplan: error: rank {} of {}: no progress for {:g} s while the ranks "
                   "agree on their inputs: another rank died or hangs\n",
                   rank, ranks, wait_limit_seconds(p))
            << std::flush;
        abort(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (first == ranks) return false;
    if (rank == first) {
      err << "shardplan: error" << (rank == 0 ? std::string() : who) << ": " << refused->what()
          << "\n"
          << std::flush;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return true;
  };
  std::optional<ExecuteInputs> inputs;
  std::optional<InputError> refused;
  try {
    inputs = read_inputs(p);
  } catch (const InputError& e) {
    refused = e;
  }
  if (agree(refused)) return 1;
  const Plan& plan = inputs->plan;
  const ReplayOptions& options = inputs->options;
  std::unique_ptr<ExecutorBackend> backend;
  try {
    // A node without a device, or whose plugin does not load, is that rank's own error.
    if (p.backend == "cuda") require_cuda_device();
    backend = p.backend == "cpu" ? make_cpu_backend(options) : make_cuda_backend(with_mpi);
  } catch (const std::exception& e) {
    err << "shardplan: error" << who << ": " << e.what() << "\n" << std::flush;
    abort(1);
  }
  try {
    check_replayable(plan, *backend);
  } catch (const InputError& e) {
    refused = e;
  }
  if (agree(refused)) return 1;
  Timeline t;
  try {
    t = replay(plan, *backend, options);
  } catch (const IntegrityError& e) {
    err << "shardplan: integrity check failed" << who << ": " << e.what() << "\n" << std::flush;
    abort(1);
  } catch (const InputError& e) {
    err << "shardplan: error" << who << ": " << e.what() << "\n" << std::flush;
    abort(1);
  } catch (const std::exception& e) {
    err << "shardplan: internal error" << who << ": " << e.what() << "\n" << std::flush;
    abort(3);
  }
  if (backend->rank() != 0) return 0;
  const MeasuredMfu mfu = measured_mfu(plan, t, p.backend);
  t.summary.mfu = mfu.value.value_or(0);
  if (!p.output.empty()) write_file_atomically(p.output, json_text(timeline_to_json(t), 1) + "\n");
  if (p.json) {
    nlohmann::json j = timeline_to_json(t);
    j.erase("ops");
    j.erase("memory");
    // No MFU is null, with the reason beside it, never a 0 that reads as a measurement.
    if (!mfu.value) {
      j["summary"]["mfu"] = nullptr;
      j["mfu_note"] = mfu.note;
    }
    j["config"] = fsdp_config_to_json(plan.config);
    j["backend"] = p.backend;
    j["ranks"] = backend->world_size();
    j["checked"] = options.check;
    out << json_text(j, 2) << "\n";
    return 0;
  }
  out << fmt::format(
      "Executed {} on {} ranks ({} backend): {} warmup + {} timed steps, {} ops per step\n",
      plan.model, backend->world_size(), p.backend, p.warmup, p.steps, plan.ops.size());
  out << fmt::format("config: {}\n", describe_config(plan.config));
  out << fmt::format("step time (slowest rank): {:.3f} ms; pool {} + persistent, {} held\n",
                     t.summary.step_seconds * 1e3,
                     format_bytes(static_cast<double>(plan.pool.size_bytes)),
                     format_bytes(static_cast<double>(t.summary.peak_reserved_bytes)));
  out << (mfu.value ? fmt::format("MFU: {:.1f} % ({})\n", 100 * *mfu.value, mfu.note)
                    : fmt::format("MFU: none ({})\n", mfu.note));
  if (p.backend == "cuda") {
    out << "integrity checks: CPU backend only\n";
    if (!p.output.empty()) out << "wrote " << p.output << "\n";
    return 0;
  }
  out << (options.check ? "integrity checks: all passed (all-gathers rebuild every shard, "
                          "reductions equal the sum over ranks, ring steps and all-to-alls "
                          "deliver each peer's chunk, a MoE combine returns every token "
                          "its dispatch sent, offloaded activations come back as "
                          "saved, no transient buffer changed between its write and its "
                          "reads)\n"
                        : "integrity checks: off\n");
  if (!p.output.empty()) out << "wrote " << p.output << "\n";
  return 0;
}

}  // namespace

Command add_execute_command(CLI::App& app) {
  auto params = std::make_shared<ExecuteParams>();
  ExecuteParams& p = *params;
  auto* execute = app.add_subcommand(
      "execute", "replay a plan on CPUs with MPI (mpirun -np GPUS), checking it on real data");
  // No CLI11 file check: a plan one rank cannot read is found by the ranks together (the
  // parser's refusal would end that rank alone, before any rank could say why).
  execute->add_option("--plan", p.plan, "plan.json")->required();
  execute->add_option("--backend", p.backend, "cpu | cuda")->capture_default_str();
  execute->add_option("--warmup", p.warmup, "untimed steps first")->capture_default_str();
  execute->add_option("--steps", p.steps, "timed steps")->capture_default_str();
  execute
      ->add_option("--compute-scale", p.compute_scale,
                   "fraction of each compute op's FLOPs run as a GEMM (cpu)")
      ->capture_default_str();
  execute
      ->add_option("--timeout", p.timeout_seconds,
                   "seconds a rank may wait without progress before the job is ended")
      ->capture_default_str();
  execute->add_flag("--no-check", p.no_check, "skip the integrity checks");
  execute->add_option("-o,--output", p.output, "write the measured timeline.json");
  execute->add_flag("--json", p.json, "machine-readable summary");

  return {execute, [params] { return run_execute(*params, std::cout, std::cerr); }};
}

}  // namespace shardplan
