#pragma once

// Published training runs held against the simulator: a committed data file of what each
// run measured (tokens/s per GPU, peak memory) and how it was configured, the prediction
// for each, and the table docs/fidelity.md is generated from (tests/simulator/
// fidelity_test.cc keeps the two equal).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// What a published memory figure counts: PyTorch's torch.cuda.max_memory_reserved (the
// caching allocator's segments), max_memory_allocated (live tensors), or the device
// memory nvidia-smi shows (reserved plus the CUDA context).
enum class MeasuredMemory { reserved, allocated, device };

// What shardplan predicted for a run when it was added, before any change was made for it:
// how the next user's job will be predicted (docs/fidelity.md leads with it). Recorded by
// record_first_looks at a commit whose model code is what was committed.
struct FirstLook {
  double tokens_per_second_per_gpu = 0;
  double memory_gib = 0;  // the figure comparable with the run's memory_kind
  bool fits = true;
  std::string commit;  // abbreviated hash of the commit that predicted it
  std::string date;    // YYYY-MM-DD
};
// A run's first look: recorded; `not_recorded` for runs added before first looks were kept
// (`"first_look": null` in the file, 2026-11-28); `missing` until record_first_looks fills it.
enum class FirstLookState { recorded, not_recorded, missing };

struct PublishedRun {
  std::string id;      // unique, short: "torchtitan-a100-llama3-8b"
  std::string source;  // where the numbers are: repository, file, table
  std::string url;
  std::string stack;  // the software that ran it: "torchtitan (FSDP2, compile)", ...
  std::string gpu;    // as the source names it: "H100 SXM 80 GB"
  ModelSpec model;
  ClusterSpec cluster;
  FsdpConfig config;  // resolved
  double tokens_per_second_per_gpu = 0;
  std::optional<double> memory_gib;  // as published, GiB
  MeasuredMemory memory_kind = MeasuredMemory::reserved;
  std::string note;  // how the measured figure was read or derived
  FirstLookState first_look_state = FirstLookState::missing;
  FirstLook first_look;  // when recorded
};

// Reads the runs file (docs/formats.md#published-runs). Every error names the file, the
// JSON path of the field and the reason; a run whose config the rules refuse is an error.
std::vector<PublishedRun> load_published_runs(const std::string& path);

struct FidelityRow {
  const PublishedRun* run = nullptr;
  std::string label;  // describe_config of the run's config
  double predicted_tokens_per_second_per_gpu = 0;
  double predicted_mfu = 0;
  double predicted_memory_gib = 0;  // the figure comparable with the run's memory_kind
  bool fits = false;
  double tokens_error = 0;             // predicted ÷ measured − 1
  std::optional<double> memory_error;  // same, where the run publishes memory
  // The same errors of the run's first look, where recorded.
  std::optional<double> first_look_tokens_error;
  std::optional<double> first_look_memory_error;
};

std::vector<FidelityRow> evaluate_published_runs(const std::vector<PublishedRun>& runs);

// Median and worst of |error| over the rows that have it; zero rows give zeros.
struct ErrorStats {
  int64_t count = 0;
  double median_abs = 0;
  double worst = 0;   // signed error of largest magnitude
  double median = 0;  // signed
  int64_t over = 0;   // rows predicted above the measurement
  int64_t under = 0;  // ... and below
};
// Median and worst of |error|, the signed median and how many rows over- and under-predict;
// zero errors give zeros.
ErrorStats error_stats(std::vector<double> errors);
ErrorStats tokens_error_stats(const std::vector<FidelityRow>& rows);
ErrorStats memory_error_stats(const std::vector<FidelityRow>& rows);
ErrorStats first_look_tokens_error_stats(const std::vector<FidelityRow>& rows);
ErrorStats first_look_memory_error_stats(const std::vector<FidelityRow>& rows);

// docs/fidelity.md: every run with its source, configuration, measured and predicted
// figures and error; the median and worst error overall and per GPU. `runs_file` is named
// in the text as where the data lives.
// Fills in the first look of every run of `runs_file` that has none (FirstLookState::missing)
// with today's prediction, `commit` and `date`, and rewrites the file (the rest as it was);
// returns the ids it recorded. The caller vouches that `commit` is the model code that
// predicted them.
std::vector<std::string> record_first_looks(const std::string& runs_file, const std::string& commit,
                                            const std::string& date);

std::string fidelity_markdown(const std::vector<FidelityRow>& rows, const std::string& runs_file);

}  // namespace shardplan
