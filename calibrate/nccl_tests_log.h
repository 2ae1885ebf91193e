#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "simulator/collective_model.h"

namespace shardplan {

// One measured collective: `bytes` and the time as nccl-tests counts them
// (simulator/collective_model.h), on ranks laid out as `layout`. `where` names the file
// and line (or probe entry) it came from, for reports and errors.
struct CollectiveSample {
  Collective op = Collective::all_reduce;
  RankLayout layout;
  double bytes = 0;
  double seconds = 0;
  std::string where;
  // The algorithm the run was held to (NCCL_ALGO=...); empty: NCCL chose.
  std::optional<NcclAlgorithm> algorithm;
};

// What one run of an nccl-tests binary printed (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf, sendrecv_perf): which collective, the ranks from its
// "#  Rank N Group G Pid P on HOST device D [bus] NAME" lines (nodes = distinct hosts),
// and per size row one sample for the out-of-place and one for the in-place time.
struct NcclTestsLog {
  std::string file;
  Collective op = Collective::all_reduce;
  int64_t ranks = 0;
  int64_t nodes = 0;
  std::string device;            // the GPU name rank 0 reports
  int64_t gpus_per_process = 1;  // the header's nGpus (-g)
  // Rows left out, and why: with -g above 1 one process launches every GPU's kernel in
  // turn, a host floor (~35 µs on 8 × H100) the times sit at until the transfer outlasts
  // it; rows with either time within 50 % of the smallest size's are left out: near the
  // floor the time is the larger of launch and transfer plus jitter, not the transfer.
  int64_t rows_at_launch_floor = 0;
  std::vector<CollectiveSample> samples;
};

// Parses nccl-tests output. The collective comes from "# Collective test starting: X_perf"
// or, in logs of older versions without that line, from the file name. Rows are read from
// the end (time algbw busbw #wrong, out-of-place then in-place), so versions with or
// without the redop and root columns parse alike; each row's algbw must match size ÷ time.
// Errors (InputError) name the file, the line and the reason.
NcclTestsLog parse_nccl_tests_log(std::string_view text, const std::string& file);
NcclTestsLog read_nccl_tests_log(const std::string& path);

}  // namespace shardplan
