#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "cli/commands.h"
#include "cli/mpi_session.h"
#include "cli/options.h"
#include "executor/probe.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "planner/plan_json.h"

namespace shardplan {
namespace {

// The distinct GEMMs the plan's compute ops run, the largest (by FLOPs) 16.
std::vector<GemmShape> probe_gemm_shapes(const Plan& plan) {
  std::vector<GemmShape> shapes;
  for (const PlanOp& op : plan.ops) {
    for (const GemmShape& g : op_gemms(plan, op)) {
      const bool seen = std::any_of(shapes.begin(), shapes.end(), [&](const GemmShape& s) {
        return s.m == g.m && s.n == g.n && s.k == g.k;
      });
      if (!seen) shapes.push_back(g);
    }
  }
  std::sort(shapes.begin(), shapes.end(), [](const GemmShape& a, const GemmShape& b) {
    return a.m * a.n * a.k > b.m * b.n * b.k;
  });
  if (shapes.size() > 16) shapes.resize(16);
  if (shapes.empty()) throw InputError("", "--plan", "the plan runs no GEMMs to probe");
  return shapes;
}

}  // namespace

int run_probe(const ProbeParams& p, std::ostream& out, std::ostream& err) {
  if (p.iterations < 1 || p.iterations > 1000)
    throw InputError("", "--iterations", fmt::format("must be in [1, 1000], got {}", p.iterations));
  // MPI counts are ints: a message stays below 2 GiB.
  // MPI counts are ints (a CPU message stays below 2 GiB); NCCL's are size_t: the CUDA
  // probe goes to nccl-tests' customary 4 GiB by default and up to 16 GiB.
  const bool cuda = p.backend == "cuda";
  const double limit = cuda ? 16.0 * (1 << 30) : 1.0 * (1 << 30);
  const double max_bytes = p.max_bytes.empty() ? (cuda ? 4.0 * (1 << 30) : 64.0 * (1 << 20))
                                               : parse_size(p.max_bytes, "--max-bytes", limit);
  if (max_bytes < 1024) throw InputError("", "--max-bytes", "must be at least 1 KiB");
  std::vector<GemmShape> gemms;
  if (!p.plan.empty()) {
    if (p.backend != "cuda")
      throw InputError("", "--plan", "GEMM shapes are probed on --backend cuda");
    gemms = probe_gemm_shapes(read_plan_file(p.plan));
  } else {
    // Squares from small to large: where cuBLAS reaches its plateau.
    for (int64_t n : {1024, 2048, 4096, 8192}) gemms.push_back({n, n, n});
  }
  MpiSession mpi;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks < 2 && p.backend == "cpu") {
    err << "shardplan: error: --backend: probe measures collectives between ranks: run it under "
           "mpirun -np N (N >= 2)\n";
    return 1;
  }
  const ProbeOptions options{.max_bytes = max_bytes, .iterations = p.iterations};
  nlohmann::json probe;
  try {
    probe = p.backend == "cuda" ? run_cuda_probe(MPI_COMM_WORLD, options, gemms)
                                : run_cpu_probe(MPI_COMM_WORLD, options);
  } catch (const std::exception& e) {
    // One rank's device error is the job's: the others wait in a collective.
    err << "shardplan: error" << (ranks > 1 ? fmt::format(" (rank {})", rank) : "") << ": "
        << e.what() << "\n"
        << std::flush;
    if (ranks > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (rank != 0) return 0;
  if (p.output.empty()) {
    out << json_text(probe, 2) << "\n";
  } else {
    write_file_atomically(p.output, json_text(probe, 2) + "\n");
    out << fmt::format(
        "wrote {}: {} collective tables over {} ranks; give it to calibrate "
        "--probe\n",
        p.output, probe.at("collectives").size(), ranks);
  }
  return 0;
}

Command add_probe_command(CLI::App& app) {
  auto params = std::make_shared<ProbeParams>();
  ProbeParams& p = *params;
  auto* probe = app.add_subcommand(
      "probe", "measure collectives on this machine for calibrate (mpirun -np N shardplan probe)");
  probe
      ->add_option("--backend", p.backend,
                   "cpu: MPI collectives between the ranks (the CPU backend's transport); cuda: "
                   "NCCL collectives, cuBLAS GEMMs and copies on the GPUs")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  probe->add_option("-o,--output", p.output, "write probe.json");
  probe->add_option("--plan", p.plan, "cuda: probe the GEMM shapes of this plan.json");
  probe->add_option("--max-bytes", p.max_bytes,
                    "largest size, nccl-tests style (default 64 MiB on cpu, up to 1 GiB; 4 GiB "
                    "on cuda, up to 16 GiB)");
  probe->add_option("--iterations", p.iterations, "timed calls per size")->capture_default_str();
  return {probe, [params] { return run_probe(*params, std::cout, std::cerr); }};
}

}  // namespace shardplan
