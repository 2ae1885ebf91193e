// Cost of reading training-stack configs: a launch script as bash would run it, and a
// command line of 100,000 unknown flags (issue 33: 0.5 ms each, over 60 s in all, when
// every one was matched against Megatron's 878 flags for a suggestion). Prints figures;
// does not pass or fail on time.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "interop/stack_job.h"

namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kModel =
    "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
    "--max-position-embeddings 1024 --micro-batch-size 1 --vocab-size 32000";

void BM_MegatronUnknownFlags(benchmark::State& state) {
  std::string text = kModel;
  for (int64_t i = 0; i < state.range(0); ++i) text += " --unknown-flag-" + std::to_string(i);
  for (auto _ : state) benchmark::DoNotOptimize(shardplan::read_megatron_args(text));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MegatronUnknownFlags)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

// Megatron-LM's Llama 3 8B FSDP script: arrays, if blocks, substitutions.
void BM_MegatronLaunchScript(benchmark::State& state) {
  const std::string text = file_text(std::string(SHARDPLAN_SOURCE_DIR) +
                                     "/tests/interop/data/launch_scripts/"
                                     "megatron_lm_train_llama3_8b_fsdp_h100_fp8.sh");
  // Inline text: read_megatron_args takes text with several words as the command line.
  for (auto _ : state) benchmark::DoNotOptimize(shardplan::read_megatron_args(text));
}
BENCHMARK(BM_MegatronLaunchScript)->Unit(benchmark::kMicrosecond);

}  // namespace
