// A training stack's config -> the job it describes -> resolved on a DGX H100 node -> the
// same job written back in that stack's format. The first line names the format
// (megatron-args, megatron-bridge or torchtitan); the rest is the config text (for
// megatron-args, a launch script read as bash would run it).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_support.h"
#include "interop/stack_job.h"
#include "models/cluster_spec.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / "shardplan_stack_config_fuzz").string();
  return fuzz::guarded([&] {
    std::string_view input = fuzz::text(data, size);
    const size_t line = input.find('\n');
    if (line == std::string_view::npos) return;
    const std::optional<StackFormat> format = parse_stack_format(input.substr(0, line));
    if (!format) return;
    input.remove_prefix(line + 1);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(input.data(), static_cast<std::streamsize>(input.size()));
    }
    const StackJob job = read_stack_config(*format, path);
    // Notes echo the input: they must stay printable, short and valid UTF-8 (dump throws
    // on invalid UTF-8).
    const std::string notes = stack_job_notes_json(job).dump();
    fuzz::require(notes.size() < 400 * 320, "notes are bounded");
    const ModelSpec model = stack_job_model(job);
    fuzz::require(model.num_layers <= 10000, "the model reader bounds the layers");
    const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, job.gpus.value_or(8));
    const FsdpConfig config =
        resolve_fsdp_config(fsdp_config_from_json(job.config, "fuzz"), model, cluster, "fuzz");
    const std::string text = emit_stack_config(*format, model, cluster, config);
    fuzz::require(!text.empty(), "an accepted job is written back");
  });
}
