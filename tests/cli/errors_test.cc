// End-to-end tests of bad input: every rejected job exits 1 with nothing on stdout and
// one line on stderr naming the file (or flag), the JSON field path and the reason.
// Bad flags that CLI11 rejects exit with CLI11's own (non-zero, non-1) codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/error.h"
#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kErrorPrefix[] = "shardplan: error: ";

const std::vector<std::string> kZooModels = {"gpt3-175b", "llama3.1-405b", "llama3-70b",
                                             "llama3-8b", "mixtral-8x7b",  "tiny"};
const std::vector<std::string> kZooClusters = {"dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72",
                                               "h100-96gb"};

// A valid model file to break one field of.
nlohmann::json small_transformer() {
  return {{"name", "small"},       {"family", "transformer"}, {"vocab_size", 100},
          {"hidden_size", 64},     {"num_layers", 2},         {"num_heads", 4},
          {"ffn_hidden_size", 128}};
}

// A valid cluster file (the DGX H100 figures) to break one field of.
nlohmann::json small_cluster() {
  return {
      {"name", "mine"},
      {"gpus_per_node", 8},
      {"gpu",
       {{"name", "H100"},
        {"hbm_bytes", 85045477376},
        {"hbm_bandwidth_bytes_per_s", 3.35e12},
        {"hbm_measured_bandwidth_bytes_per_s", 2.9e12},
        {"bf16_dense_flops", 989.4e12},
        {"fp8_dense_flops", 1978.9e12},
        {"sm_count", 132}}},
      {"intra_node",
       {{"name", "NVLink4"},
        {"bandwidth_bytes_per_s", 450e9},
        {"measured_bus_bandwidth_bytes_per_s", 360e9},
        {"latency_s", 6e-7}}},
      {"inter_node",
       {{"name", "NDR"},
        {"bandwidth_bytes_per_s", 50e9},
        {"measured_bus_bandwidth_bytes_per_s", 48e9},
        {"latency_s", 2.7e-6}}},
      {"nccl",
       {{"base_latency_s", 6.6e-6}, {"collective_sms", 32}, {"nvls", true}, {"ib_sharp", true}}},
      {"non_tensor_bytes", 1294881024}};
}

std::string without(nlohmann::json json, const nlohmann::json::json_pointer& field) {
  json[field.parent_pointer()].erase(field.back());
  return json.dump(2);
}

std::string with(nlohmann::json json, const nlohmann::json::json_pointer& field,
                 nlohmann::json value) {
  json[field] = std::move(value);
  return json.dump(2);
}

// One rejected command. In `args`, `where` and `reason`, "@name" stands for the path
// of the temp file `files[name]` is written to.
struct ErrorCase {
  std::string name;
  std::vector<std::string> args;
  std::string where;                // "file: /field" or "--flag": what the message names
  std::vector<std::string> reason;  // phrases of the reason, after `where`
  std::map<std::string, std::string> files;
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.name;
}

std::string substitute(std::string text, const std::map<std::string, std::string>& paths) {
  for (const auto& [name, path] : paths) {
    for (auto at = text.find("@" + name); at != std::string::npos;
         at = text.find("@" + name, at + path.size())) {
      text.replace(at, name.size() + 1, path);
    }
  }
  return text;
}

class RejectedInputTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(RejectedInputTest, ExitsOneAndNamesFileFieldAndReason) {
  const ErrorCase& c = GetParam();
  std::map<std::string, std::string> paths;
  for (const auto& [name, text] : c.files) {
    paths[name] = write_temp_file("error_" + c.name + "_" + name, text);
  }
  std::vector<std::string> args;
  for (const std::string& a : c.args) args.push_back(substitute(a, paths));
  const CommandResult r = run_shardplan(args);

  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // One line: the prefix, where, then the reason.
  ASSERT_TRUE(r.err.starts_with(kErrorPrefix)) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const std::string message = r.err.substr(sizeof(kErrorPrefix) - 1);
  const std::string where = substitute(c.where, paths) + ": ";
  ASSERT_TRUE(message.starts_with(where)) << "expected '" << where << "' first in: " << r.err;
  const std::string reason = message.substr(where.size());
  for (const std::string& phrase : c.reason) {
    EXPECT_THAT(reason, HasSubstr(substitute(phrase, paths)));
  }
}

std::vector<ErrorCase> error_cases() {
  std::vector<ErrorCase> cases;

  // Zoo names: the nearest valid name and the whole list.
  ErrorCase model{"unknown_model",
                  {"describe", "--model", "llama3-8", "--json"},
                  "--model",
                  {"unknown model 'llama3-8'", "did you mean 'llama3-8b'?"}};
  model.reason.insert(model.reason.end(), kZooModels.begin(), kZooModels.end());
  cases.push_back(model);
  ErrorCase cluster{"unknown_cluster",
                    {"describe", "--cluster", "dgx-h10", "--json"},
                    "--cluster",
                    {"unknown cluster 'dgx-h10'", "did you mean 'dgx-h100'?"}};
  cluster.reason.insert(cluster.reason.end(), kZooClusters.begin(), kZooClusters.end());
  cases.push_back(cluster);

  // Model files.
  cases.push_back({"model_invalid_json",
                   {"describe", "--model", "@m.json"},
                   "@m.json",
                   // The second comma is at line 4, column 21.
                   {"invalid JSON", "line 4, column 21", "unexpected ','"},
                   {{"m.json",
                     "{\n  \"name\": \"x\",\n  \"family\": \"transformer\",\n"
                     "  \"vocab_size\": 100,,\n  \"hidden_size\": 64\n}\n"}}});
  cases.push_back(
      {"model_missing_hidden_size",
       {"describe", "--model", "@m.json", "--json"},
       "@m.json: /hidden_size",
       {"required field is missing"},
       {{"m.json", without(small_transformer(), nlohmann::json::json_pointer("/hidden_size"))}}});
  cases.push_back(
      {"model_unknown_key",
       {"describe", "--model", "@m.json", "--json"},
       "@m.json: /num_kv_head",
       {"unknown field 'num_kv_head'", "did you mean 'num_kv_heads'?"},
       {{"m.json", with(small_transformer(), nlohmann::json::json_pointer("/num_kv_head"), 2)}}});
  cases.push_back(
      {"model_negative_hidden_size",
       {"describe", "--model", "@m.json", "--json"},
       "@m.json: /hidden_size",
       {"must be positive, got -64"},
       {{"m.json", with(small_transformer(), nlohmann::json::json_pointer("/hidden_size"), -64)}}});
  cases.push_back(
      {"model_zero_layers",
       {"describe", "--model", "@m.json", "--json"},
       "@m.json: /num_layers",
       {"must be positive, got 0"},
       {{"m.json", with(small_transformer(), nlohmann::json::json_pointer("/num_layers"), 0)}}});
  cases.push_back({"model_unknown_family",
                   {"describe", "--model", "@m.json", "--json"},
                   "@m.json: /family",
                   {"unknown model family 'explict'", "did you mean 'explicit'?"},
                   {{"m.json", with(small_transformer(), nlohmann::json::json_pointer("/family"),
                                    "explict")}}});
  cases.push_back({"model_file_missing",
                   {"describe", "--model", "/nonexistent/dir/model.json", "--json"},
                   "/nonexistent/dir/model.json",
                   {"cannot open file"}});
  cases.push_back({"explicit_zero_dimension",
                   {"describe", "--model", "@m.json", "--json"},
                   "@m.json: /root/children/0/parameters/0/shape",
                   {"dimension 1 must be positive, got 0"},
                   {{"m.json", R"({"name": "e", "family": "explicit", "root": {"children": [
                       {"name": "a", "type": "Linear",
                        "parameters": [{"name": "weight", "shape": [4, 0]}]}]}})"}}});
  cases.push_back({"explicit_unknown_parameter_key",
                   {"describe", "--model", "@m.json", "--json"},
                   "@m.json: /root/children/0/parameters/0/dtyp",
                   {"unknown field 'dtyp'", "did you mean 'dtype'?"},
                   {{"m.json", R"({"name": "e", "family": "explicit", "root": {"children": [
                       {"name": "a", "type": "Linear",
                        "parameters": [{"name": "weight", "shape": [4, 4], "dtyp": "bf16"}]}]}})"}}});
  // Config files and --set.
  cases.push_back({"config_unknown_key",
                   {"describe", "--config", "@c.json", "--json"},
                   "@c.json: /sharding_strategie",
                   {"unknown field 'sharding_strategie'", "did you mean 'sharding_strategy'?"},
                   {{"c.json", R"({"sharding_strategie": "no_shard"})"}}});
  cases.push_back({"config_bad_strategy_value",
                   {"describe", "--config", "@c.json", "--json"},
                   "@c.json: /sharding_strategy",
                   {"unknown sharding_strategy value 'no_shar'", "did you mean 'no_shard'?"},
                   {{"c.json", R"({"sharding_strategy": "no_shar"})"}}});
  cases.push_back({"config_dp_shard_not_gpu_count",
                   {"describe", "--config", "@c.json", "--json"},
                   "@c.json: /dp_shard",
                   {"1 × 3 × 1 × 1 = 3", "must equal the GPU count 8"},
                   {{"c.json", R"({"dp_shard": 3})"}}});
  cases.push_back({"set_dp_shard_not_gpu_count",
                   {"describe", "--set", "dp_shard=3", "--json"},
                   "config (with flags): /dp_shard",
                   {"1 × 3 × 1 × 1 = 3", "must equal the GPU count 8"}});
  // The device mesh (default model llama3-8b: 32 heads, 8 KV heads, FFN 14336; 8 GPUs).
  cases.push_back({"tp_not_dividing_the_gpus",
                   {"describe", "--set", "tp=3", "--set", "sequence_parallel=false", "--json"},
                   "config (with flags): /tp",
                   {"tp × cp = 3 × 1 = 3 does not divide the 8 GPUs"}});
  cases.push_back({"tp_not_dividing_kv_heads",
                   {"describe", "--model", "tiny", "--set", "tp=4", "--json"},
                   "config (with flags): /tp",
                   {"tp = 4 does not divide tiny's num_kv_heads 2"}});
  cases.push_back(
      {"tp_not_dividing_heads",
       {"describe", "--gpus", "6", "--set", "tp=6", "--set", "sequence_parallel=false", "--json"},
       "config (with flags): /tp",
       {"tp = 6 does not divide llama3-8b's num_heads 32"}});
  cases.push_back({"tp_beyond_the_nvlink_domain",
                   {"describe", "--nodes", "2", "--set", "tp=16", "--json"},
                   "config (with flags): /tp",
                   {"spans more than one NVLink domain", "use tp ≤ 8"}});
  cases.push_back({"seq_len_not_split_into_2cp_chunks",
                   {"describe", "--set", "cp=4", "--set", "seq_len=8196", "--json"},
                   "config (with flags): /seq_len",
                   {"2·cp = 8 load-balanced chunks", "8196 is not a multiple of 8"}});
  cases.push_back({"seq_len_not_split_over_tp",
                   {"describe", "--set", "tp=8", "--set", "seq_len=8196", "--json"},
                   "config (with flags): /seq_len",
                   {"sequence parallelism splits each rank's 8196 tokens", "multiple of 8"}});
  cases.push_back({"sequence_parallel_without_tp",
                   {"describe", "--set", "sequence_parallel=true", "--json"},
                   "config (with flags): /sequence_parallel",
                   {"set tp > 1"}});
  cases.push_back({"tp_comm_overlap_without_sp",
                   {"describe", "--set", "tp=2", "--set", "sequence_parallel=false", "--set",
                    "tp_comm_overlap=true", "--json"},
                   "config (with flags): /tp_comm_overlap",
                   {"only; set sequence_parallel: true"}});
  cases.push_back({"cp_comm_without_cp",
                   {"describe", "--set", "cp_comm=a2a", "--json"},
                   "config (with flags): /cp_comm",
                   {"only applies with cp > 1"}});
  cases.push_back({"cp_comm_unknown",
                   {"describe", "--set", "cp=2", "--set", "cp_comm=ring", "--json"},
                   "config (with flags): /cp_comm",
                   {"unknown cp_comm value 'ring'"}});
  cases.push_back({"a2a_heads_over_cp",
                   {"describe", "--set", "tp=8", "--set", "cp=2", "--set", "cp_comm=a2a", "--nodes",
                    "2", "--json"},
                   "config (with flags): /cp",
                   {"cp = 2 does not divide llama3-8b's KV heads per tp rank 1"}});
  cases.push_back({"tp_on_an_explicit_model",
                   {"describe", "--model", "@m.json", "--gpus", "2", "--set", "tp=2", "--json"},
                   "config (with flags): /tp",
                   {"e is an explicit model", "use tp = cp = 1"},
                   {{"m.json", R"({"name": "e", "family": "explicit", "root": {"children": [
                       {"name": "a", "type": "Linear",
                        "parameters": [{"name": "weight", "shape": [4, 4]}]}]}})"}}});
  cases.push_back({"set_dp_shard_zero",
                   {"describe", "--set", "dp_shard=0", "--json"},
                   "config (with flags): /dp_shard",
                   {"must be positive, got 0"}});
  cases.push_back({"fp8_param_gather_needs_zero3",
                   {"describe", "--set", "fp8_param_gather=true", "--set",
                    "sharding_strategy=optim_grads", "--json"},
                   "config (with flags): /fp8_param_gather",
                   {"needs sharding_strategy optim_grads_params", "got optim_grads"}});
  cases.push_back(
      {"fp8_param_gather_on_a100",
       {"describe", "--cluster", "dgx-a100", "--set", "fp8_param_gather=true", "--json"},
       "config (with flags): /fp8_param_gather",
       {"A100", "no FP8 tensor cores"}});
  cases.push_back({"fp8_transpose_cache_without_fp8",
                   {"describe", "--set", "keep_fp8_transpose_cache=true", "--json"},
                   "config (with flags): /keep_fp8_transpose_cache",
                   {"only applies with fp8_param_gather"}});
  cases.push_back({"outer_optim_with_dp_outer_one",
                   {"describe", "--set", "outer_strategy=optim", "--json"},
                   "config (with flags): /outer_strategy",
                   {"dp_outer, which is 1"}});
  cases.push_back({"set_unknown_key",
                   {"describe", "--set", "nonexistent_key=1", "--json"},
                   "--set: nonexistent_key",
                   {"unknown config key 'nonexistent_key'", "sharding_strategy", "dp_shard"}});
  cases.push_back({"set_misspelt_key",
                   {"describe", "--set", "micro_bach=2", "--json"},
                   "--set: micro_bach",
                   {"unknown config key 'micro_bach'", "did you mean 'micro_batch'?"}});
  cases.push_back({"set_without_equals",
                   {"describe", "--set", "dp_shard", "--json"},
                   "--set: dp_shard",
                   {"expected key=value"}});
  cases.push_back(
      {"set_recompute_partial",
       {"describe", "--set", "recompute=partial", "--json"},
       "config (with flags): /recompute",
       {"unknown recompute mode 'partial'", "none, selective, full, sac_op, sac_layer"}});
  cases.push_back({"set_stack_unknown",
                   {"simulate", "--set", "stack=torch", "--json"},
                   "config (with flags): /stack",
                   {"unknown stack 'torch'", "megatron-te, torch-compile, torch-eager"}});
  cases.push_back({"set_recompute_every_without_sac_layer",
                   {"simulate", "--set", "recompute_every=3", "--json"},
                   "config (with flags): /recompute_every",
                   {"set recompute: sac_layer"}});
  cases.push_back({"set_allocator_unknown",
                   {"simulate", "--set", "allocator=expandible", "--json"},
                   "config (with flags): /allocator",
                   {"expandable"}});
  cases.push_back({"set_unit_pattern_matches_nothing",
                   {"describe", "--set", "unit_modules=[\"blocks.*\"]", "--json"},
                   "config (with flags): /unit_modules/0",
                   {"pattern 'blocks.*' matches no module of llama3-8b"}});
  cases.push_back({"gpt3_default_seq_len_exceeds_positions",
                   {"describe", "--model", "gpt3-175b", "--json"},
                   "config: /seq_len",
                   {"8192 exceeds the 2048 positions gpt3-175b was built with"}});
  cases.push_back({"gpt3_seq_len_one_past_positions",
                   {"describe", "--model", "gpt3-175b", "--seq-len", "2049", "--json"},
                   "config (with flags): /seq_len",
                   {"2049 exceeds the 2048 positions"}});

  // GPU counts.
  cases.push_back({"gpus_not_whole_nodes",
                   {"describe", "--gpus", "12", "--json"},
                   "--gpus",
                   {"12 GPUs do not fill whole nodes of 8 on dgx-h100"}});
  cases.push_back({"nodes_and_gpus",
                   {"describe", "--nodes", "2", "--gpus", "16", "--json"},
                   "--nodes",
                   {"either --nodes or --gpus"}});

  // Cluster files.
  cases.push_back(
      {"cluster_missing_gpu_field",
       {"describe", "--cluster", "@k.json", "--json"},
       "@k.json: /gpu/hbm_bytes",
       {"required field is missing"},
       {{"k.json", without(small_cluster(), nlohmann::json::json_pointer("/gpu/hbm_bytes"))}}});
  cases.push_back(
      {"cluster_unknown_gpu_field",
       {"describe", "--cluster", "@k.json", "--json"},
       "@k.json: /gpu/sm_cout",
       {"unknown field 'sm_cout'", "did you mean 'sm_count'?"},
       {{"k.json", with(small_cluster(), nlohmann::json::json_pointer("/gpu/sm_cout"), 132)}}});

  // Values no real job uses, and arithmetic that would overflow (issue: absurd inputs).
  // Found by the config fuzz target: a raw --set value is any bytes, and JSON text must
  // be UTF-8 (it escaped as nlohmann's type_error, an internal error).
  cases.push_back({"set_value_not_utf8",
                   {"simulate", "--set", "dp_outer=\xa9"},
                   "--set: dp_outer",
                   {"not valid UTF-8"}});
  cases.push_back({"grad_accum_plan_too_large",
                   {"simulate", "--set", "grad_accum=1000000", "--json"},
                   "config (with flags): /grad_accum",
                   {"1000000 micro-batches of 33 FSDP units", "more than the 200000"}});
  cases.push_back({"grad_accum_past_limit",
                   {"simulate", "--set", "grad_accum=2000000", "--json"},
                   "config (with flags): /grad_accum",
                   {"must be in [1, 1048576], got 2000000"}});
  cases.push_back({"seq_len_no_job_uses",
                   {"simulate", "--set", "seq_len=99999999999", "--json"},
                   "config (with flags): /seq_len",
                   {"must be in [1, 16777216], got 99999999999"}});
  cases.push_back({"tokens_per_micro_batch",
                   {"simulate", "--set", "micro_batch=4096", "--set", "seq_len=8192", "--json"},
                   "config (with flags): /micro_batch",
                   {"4096 × 8192 tokens exceeds 16777216"}});
  cases.push_back(
      {"dp_product_would_wrap",
       {"simulate", "--set", "dp_shard=4611686018427387906", "--set", "dp_outer=4", "--json"},
       "config (with flags): /dp_shard",
       {"must be in [1, 1048576]"}});
  cases.push_back({"prefetch_past_int64",
                   {"simulate", "--set", "forward_prefetch=9223372036854775808", "--json"},
                   "config (with flags): /forward_prefetch",
                   {"exceeds the largest integer"}});
  cases.push_back({"config_number_past_double",
                   {"simulate", "--config", "@c.json", "--json"},
                   "@c.json",
                   {"invalid JSON: a number past the range of a double: '1e999'"},
                   {{"c.json", R"({"micro_batch": 1e999})"}}});
  cases.push_back({"nodes_past_gpu_limit",
                   {"simulate", "--nodes", "4611686018427387904", "--json"},
                   "--nodes",
                   {"exceed 1048576 GPUs"}});
  cases.push_back({"gpus_past_gpu_limit",
                   {"simulate", "--gpus", "2097152", "--json"},
                   "--gpus",
                   {"2097152 exceeds 1048576 GPUs"}});
  cases.push_back(
      {"cluster_bandwidth_in_gigabytes",
       {"simulate", "--cluster", "@k.json", "--json"},
       "@k.json: /intra_node/bandwidth_bytes_per_s",
       {"must be in [1e+08, 1e+14], got 450"},
       {{"k.json", with(small_cluster(),
                        nlohmann::json::json_pointer("/intra_node/bandwidth_bytes_per_s"), 450)}}});
  cases.push_back({"pack_sizes_past_int64",
                   {"pack", "--input", "@b.csv"},
                   "@b.csv: line 2, column size",
                   {"must be in [1, 2305843009213693952], got 9223372036854775807"},
                   {{"b.csv",
                     "id,lower,upper,size\n0,0,2,9223372036854775807\n"
                     "1,1,3,9223372036854775807\n"}}});
  cases.push_back({"pack_sizes_add_up_past_int64",
                   {"pack", "--input", "@b.csv"},
                   "@b.csv: line 3, column size",
                   {"the sizes add up past 2305843009213693952 (2^61) bytes"},
                   {{"b.csv", "id,lower,upper,size\n0,0,2,2305843009213693952\n1,1,3,1\n"}}});
  cases.push_back({"pack_inclusive_end_overflows",
                   {"pack", "--input", "@b.csv"},
                   "@b.csv: line 2, column end",
                   {"must be in [0, 4611686018427387903], got 9223372036854775807"},
                   {{"b.csv", "id,start,end,size\n0,0,9223372036854775807,8\n"}}});
  cases.push_back({"pack_negative_time",
                   {"pack", "--input", "@b.csv"},
                   "@b.csv: line 2, column lower",
                   {"must not be negative, got -5"},
                   {{"b.csv", "id,lower,upper,size\n0,-5,3,8\n"}}});
  const std::string csv = "id,lower,upper,size\n0,0,2,8\n";
  cases.push_back({"pack_alignment_huge",
                   {"pack", "--input", "@b.csv", "--alignment", "4611686018427387904"},
                   "--alignment",
                   {"must be in [1, 1073741824]"},
                   {{"b.csv", csv}}});
  cases.push_back({"pack_time_limit_nan",
                   {"pack", "--input", "@b.csv", "--time-limit", "nan"},
                   "--time-limit",
                   {"must be positive, got nan"},
                   {{"b.csv", csv}}});
  cases.push_back({"pack_time_limit_huge",
                   {"pack", "--input", "@b.csv", "--time-limit", "1e30"},
                   "--time-limit",
                   {"must be at most 604800 seconds"},
                   {{"b.csv", csv}}});
  cases.push_back({"pack_capacity_huge",
                   {"pack", "--input", "@b.csv", "--capacity", "9223372036854775807"},
                   "--capacity",
                   {"must be in [1, 4611686018427387904]"},
                   {{"b.csv", csv}}});
  cases.push_back({"collective_bytes_huge",
                   {"collective", "--op", "all_gather", "--bytes", "1e30"},
                   "--bytes",
                   {"must be at most"}});
  cases.push_back({"sweep_jobs_huge",
                   {"sweep", "--model", "tiny", "--jobs", "1048577"},
                   "--jobs",
                   {"must be in [0, 1024], got 1048577"}});
  cases.push_back({"sweep_mem_cap_huge",
                   {"sweep", "--model", "tiny", "--mem-cap", "1e30"},
                   "--mem-cap",
                   {"must be at most"}});
  cases.push_back({"sweep_every_configuration_invalid",
                   {"sweep", "--model", "tiny", "--prefetch", "9223372036854775807"},
                   "sweep",
                   {"all 1512 configurations are invalid", "): /forward_prefetch",
                    "must be in [0, 1048576], got 9223372036854775807"}});
  cases.push_back({"sweep_mem_cap_below_a_byte",
                   {"sweep", "--model", "tiny", "--mem-cap", "0.000001"},
                   "--mem-cap",
                   {"must be at least 1 byte"}});
  cases.push_back({"sweep_space_too_large",
                   {"sweep", "--model", "tiny", "--space", "@s.json"},
                   "@s.json",
                   {"more than 100000 configurations"},
                   {{"s.json", [] {
                       nlohmann::json prefetch = nlohmann::json::array();
                       for (int i = 0; i < 400; ++i) prefetch.push_back(i);
                       nlohmann::json micro = nlohmann::json::array();
                       for (int i = 1; i <= 400; ++i) micro.push_back(i);
                       return nlohmann::json{{"prefetch", prefetch}, {"micro_batch", micro}}.dump();
                     }()}}});
  cases.push_back({"explicit_modules_nested_too_deep",
                   {"describe", "--model", "@m.json", "--json"},
                   // A JSON path of 2.8 kB is shown by its two ends (printable_name).
                   "@m.json: " +
                       [] {
                         std::string path = "/root";
                         for (int i = 0; i < 257; ++i) path += "/children/0";
                         return printable_name(path);
                       }(),
                   {"modules nest deeper than 256 levels"},
                   {{"m.json", [] {
                       nlohmann::json leaf = {{"name", "leaf"},
                                              {"parameters", {{{"name", "w"}, {"shape", {4}}}}}};
                       for (int i = 0; i < 300; ++i)
                         leaf = {{"name", "m" + std::to_string(i)}, {"children", {leaf}}};
                       return nlohmann::json{{"name", "deep"},
                                             {"family", "explicit"},
                                             {"root", {{"children", {leaf}}}}}
                           .dump();
                     }()}}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, RejectedInputTest, ::testing::ValuesIn(error_cases()),
                         [](const ::testing::TestParamInfo<ErrorCase>& param_info) {
                           return param_info.param.name;
                         });

// A valid cluster file is accepted, so the broken ones above fail for their one field.
TEST(ClusterFileTest, TheUnbrokenClusterFileIsAccepted) {
  const std::string file = write_temp_file("good_cluster.json", small_cluster().dump());
  const CommandResult r =
      run_shardplan({"describe", "--model", "tiny", "--cluster", file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json d = stdout_json(r);
  EXPECT_EQ(d.at("cluster").at("name"), "mine");
  EXPECT_EQ(d.at("memory").at("capacity_bytes").get<double>(), 85045477376.0);
}

TEST(ModelFileTest, TheUnbrokenModelFileIsAccepted) {
  const std::string file = write_temp_file("good_model.json", small_transformer().dump());
  const CommandResult r = run_shardplan({"describe", "--model", file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(stdout_json(r).at("model").at("name"), "small");
}

// ---------------------------------------------------------------------------------------
// Messages that name the wrong thing (see the BUG notes).

// nlohmann's lexer errors end in "; last read: '...'"; the reason must survive that.
TEST(ErrorMessageTest, InvalidLiteralKeepsItsReason) {
  const std::string file =
      write_temp_file("bad_literal.json", "{\n  \"name\": \"x\",\n  \"family\": tru\n}\n");
  const CommandResult r = run_shardplan({"describe", "--model", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr(file + ": invalid JSON at line 3, column"));
  EXPECT_THAT(r.err, HasSubstr("invalid literal"));
}

// A unit_modules pattern from a config file is reported against that file.
TEST(ErrorMessageTest, UnitModulesErrorNamesTheConfigFile) {
  const std::string file = write_temp_file("bad_units.json", R"({"unit_modules": ["blocks.*"]})");
  const CommandResult r = run_shardplan({"describe", "--config", file, "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("/unit_modules/0"));
  EXPECT_THAT(r.err, HasSubstr(file + ": /unit_modules/0: "));
}

// A value given by --set is not blamed on the config file alone.
TEST(ErrorMessageTest, JobCheckOfSetValueSaysWithSet) {
  const std::string file = write_temp_file("batch_only.json", R"({"micro_batch": 2})");
  const CommandResult r =
      run_shardplan({"describe", "--config", file, "--set", "dp_shard=3", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("/dp_shard: "));
  EXPECT_THAT(r.err, HasSubstr(file + " (with flags): /dp_shard: "));
}

// ---------------------------------------------------------------------------------------
// Flags CLI11 rejects before shardplan runs: its own exit codes (above 1), stderr names
// the flag.

struct BadFlagCase {
  std::string name;
  std::vector<std::string> args;
  std::string mentions;
};

void PrintTo(const BadFlagCase& c, std::ostream* os) {
  *os << c.name;
}

class BadFlagTest : public ::testing::TestWithParam<BadFlagCase> {};

TEST_P(BadFlagTest, ExitsNonZeroNamingTheFlag) {
  const BadFlagCase& c = GetParam();
  for (const std::string& a : c.args) {
    if (a.starts_with(SHARDPLAN_SHARED_DIR)) SHARDPLAN_SKIP_WITHOUT_SHARED();
  }
  const CommandResult r = run_shardplan(c.args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_GT(r.exit_code, 1) << "CLI11's codes, not shardplan's bad-input 1: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_THAT(r.err, HasSubstr(c.mentions));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_TRUE(r.err.starts_with(kErrorPrefix)) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Cli11, BadFlagTest,
    ::testing::Values(
        BadFlagCase{"zero_nodes", {"describe", "--nodes", "0"}, "--nodes"},
        BadFlagCase{"zero_micro_batch", {"describe", "--micro-batch", "0"}, "--micro-batch"},
        BadFlagCase{"recompute_partial", {"describe", "--recompute", "partial"}, "--recompute"},
        BadFlagCase{"config_file_missing",
                    {"describe", "--config", "/nonexistent/dir/config.json"},
                    "--config"},
        BadFlagCase{"unknown_flag", {"describe", "--bogus"}, "--bogus"},
        BadFlagCase{"negative_depth",
                    {"trace", "import", SHARDPLAN_SHARED_DIR "/traces-real/nccl_data.json.gz",
                     "--depth", "-1"},
                    "--depth: must be at least 0, got -1"},
        BadFlagCase{"fractional_nodes", {"describe", "--nodes", "0.5"}, "expected a whole number"},
        BadFlagCase{"nan_prefetch", {"sweep", "--prefetch", "nan"}, "--prefetch"},
        BadFlagCase{"no_subcommand", {}, "subcommand"}),
    [](const ::testing::TestParamInfo<BadFlagCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace shardplan::testing
