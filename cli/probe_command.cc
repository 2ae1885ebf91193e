#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/mpi_session.h"
#include "cli/options.h"
#include "executor/probe.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/text_format.h"

namespace shardplan {

int run_probe(const ProbeParams& p, std::ostream& out, std::ostream& err) {
  if (p.iterations < 1 || p.iterations > 1000)
    throw InputError("", "--iterations", fmt::format("must be in [1, 1000], got {}", p.iterations));
  // MPI counts are ints: a message stays below 2 GiB.
  const double max_bytes = parse_size(p.max_bytes, "--max-bytes", 1024.0 * 1024 * 1024);
  if (max_bytes < 1024) throw InputError("", "--max-bytes", "must be at least 1 KiB");
  MpiSession mpi;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks < 2) {
    err << "shardplan: error: --backend: probe measures collectives between ranks: run it under "
           "mpirun -np N (N >= 2)\n";
    return 1;
  }
  const nlohmann::json probe =
      run_cpu_probe(MPI_COMM_WORLD, {.max_bytes = max_bytes, .iterations = p.iterations});
  if (rank != 0) return 0;
  if (p.output.empty()) {
    out << probe.dump(2) << "\n";
  } else {
    write_file_atomically(p.output, probe.dump(2) + "\n");
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
                   "cpu: MPI collectives between the ranks (the CPU backend's transport)")
      ->check(CLI::IsMember({"cpu"}))
      ->capture_default_str();
  probe->add_option("-o,--output", p.output, "write probe.json");
  probe->add_option("--max-bytes", p.max_bytes, "largest size, nccl-tests style (up to 1 GiB)")
      ->capture_default_str();
  probe->add_option("--iterations", p.iterations, "timed calls per size")->capture_default_str();
  return {probe, [params] { return run_probe(*params, std::cout, std::cerr); }};
}

}  // namespace shardplan
