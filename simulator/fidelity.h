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
};

std::vector<FidelityRow> evaluate_published_runs(const std::vector<PublishedRun>& runs);

// Median and worst of |error| over the rows that have it; zero rows give zeros.
struct ErrorStats {
  int64_t count = 0;
  double median_abs = 0;
  double worst = 0;  // signed error of largest magnitude
};
ErrorStats tokens_error_stats(const std::vector<FidelityRow>& rows);
ErrorStats memory_error_stats(const std::vector<FidelityRow>& rows);

// docs/fidelity.md: every run with its source, configuration, measured and predicted
// figures and error; the median and worst error overall and per GPU. `runs_file` is named
// in the text as where the data lives.
std::string fidelity_markdown(const std::vector<FidelityRow>& rows, const std::string& runs_file);

}  // namespace shardplan
