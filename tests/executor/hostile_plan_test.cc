// Hand-mutated plan files through what the commands do with one: read, validate and, for
// each that validates, simulate and replay on the fake backend (exercise_plan.h). Each
// mutation that crashed or misled a command in issue 33's bad-input campaign is refused
// with its kind; every number of a plan set to an extreme is refused or gives sane
// results, never a crash, a hang or an absurd number. The plan.json fuzz target
// (tests/fuzz/plan_json_fuzz.cc) runs the same path on what it generates.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "tests/executor/exercise_plan.h"

namespace shardplan::testing {
namespace {

struct BaseConfig {
  std::string name;
  std::string model;
  int64_t gpus;
  nlohmann::json settings;
};

// Plans that between them hold every op kind and buffer role the executor treats apart.
const std::vector<BaseConfig>& base_configs() {
  static const std::vector<BaseConfig> configs = {
      {"zero3", "tiny", 2, {{"grad_accum", 2}}},
      {"offload_tp_cp",
       "tiny",
       4,
       {{"tp", 2}, {"cp", 2}, {"offload_activations", 2}, {"seq_len", 128}}},
      {"moe_alltoall_nosync",
       "tiny-moe",
       4,
       {{"ep", 2},
        {"moe_dispatcher", "alltoall"},
        {"stack", "torch-compile"},
        {"no_sync", true},
        {"grad_accum", 2},
        {"seq_len", 128}}},
  };
  return configs;
}

nlohmann::json base_plan(const BaseConfig& base) {
  const ModelSpec model = load_model(base.model);
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, base.gpus);
  nlohmann::json settings = base.settings;
  if (!settings.contains("seq_len")) settings["seq_len"] = 64;
  const FsdpConfig c =
      resolve_fsdp_config(fsdp_config_from_json(settings, "cfg"), model, cluster, "cfg");
  return plan_to_json(build_plan(model, cluster, c));
}

// What a command makes of `json`: "read: ..." for a reader's error, the validator's error
// kind, or "valid" after exercise_valid_plan found nothing wrong (a failure names it).
std::string outcome(const nlohmann::json& json, const std::string& what) {
  Plan plan;
  try {
    plan = plan_from_json(json, "plan.json");
  } catch (const InputError& e) {
    return std::string("read: ") + e.what();
  }
  if (const auto error = validate_plan(plan)) return std::string(plan_error_kind_name(error->kind));
  const auto broken = exercise_valid_plan(plan);
  EXPECT_FALSE(broken.has_value()) << what << ": " << *broken;
  return "valid";
}

TEST(HostilePlan, TheBasePlansRunEverywhere) {
  for (const BaseConfig& base : base_configs())
    EXPECT_EQ(outcome(base_plan(base), base.name), "valid") << base.name;
}

// The first element of `list` whose `key` is `value`.
nlohmann::json& first_with(nlohmann::json& list, const std::string& key,
                           const nlohmann::json& value) {
  for (nlohmann::json& item : list)
    if (item[key] == value) return item;
  ADD_FAILURE() << "no " << key << " " << value;
  return list[0];
}

// Issue 33's findings, each as the campaign made it: a crash (execute's SIGSEGV, SIGBUS,
// bad_alloc; pack's internal error), a hang (a GEMM the CPU backend ran until its
// watchdog) or an absurd number (MFU 9.8e295, steps of 1e296 s, capacity -1, peaks past
// 2^62 bytes). Each is now one clear error.
TEST(HostilePlan, TheCampaignsPlansAreRefused) {
  constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
  struct Mutation {
    std::string what;
    std::function<void(nlohmann::json&)> mutate;
    std::string kind;
  };
  const std::vector<Mutation> mutations = {
      {"a buffer of 2^63 - 1 bytes",
       [&](nlohmann::json& j) { first_with(j["buffers"], "persistent", true)["bytes"] = kMaxInt; },
       "out_of_range"},
      {"a transient buffer of 2^63 - 1 bytes",
       [&](nlohmann::json& j) { first_with(j["buffers"], "persistent", false)["bytes"] = kMaxInt; },
       "out_of_range"},
      {"an op naming segment 999",
       [](nlohmann::json& j) { first_with(j["ops"], "kind", "forward")["segment"] = 999; },
       "bad_reference"},
      {"an op naming unit 999",
       [](nlohmann::json& j) { first_with(j["ops"], "kind", "all_gather")["unit"] = 999; },
       "bad_reference"},
      {"an op in micro-batch 99",
       [](nlohmann::json& j) { first_with(j["ops"], "kind", "backward")["micro_batch"] = 99; },
       "bad_reference"},
      {"a GEMM of [10^6, 10^6, 10^6]",
       [](nlohmann::json& j) {
         j["segments"][1]["gemms"][0] = {1'000'000, 1'000'000, 1'000'000};
       },
       "size_mismatch"},
      {"a GEMM of [2^40, 2^40, 2^40]",
       [](nlohmann::json& j) {
         const int64_t d = int64_t{1} << 40;
         j["segments"][1]["gemms"][0] = {d, d, d};
       },
       "out_of_range"},
      {"model FLOPs of 9.8e295", [](nlohmann::json& j) { j["model_flops"] = 9.8e295; },
       "out_of_range"},
      {"a compute op of 1e296 FLOPs",
       [](nlohmann::json& j) { first_with(j["ops"], "kind", "backward")["flops"] = 1e296; },
       "out_of_range"},
      {"a collective of 1e296 bytes",
       [](nlohmann::json& j) { first_with(j["ops"], "kind", "all_gather")["bytes"] = 1e296; },
       "out_of_range"},
      {"capacity -1", [](nlohmann::json& j) { j["capacity_bytes"] = -1; }, "out_of_range"},
      {"a pool of 2^62 bytes",
       [](nlohmann::json& j) { j["pool"]["size_bytes"] = int64_t{1} << 62; }, "out_of_range"},
  };
  const nlohmann::json base = base_plan(base_configs()[0]);
  for (const Mutation& m : mutations) {
    nlohmann::json j = base;
    m.mutate(j);
    EXPECT_EQ(outcome(j, m.what), m.kind) << m.what;
  }
}

// Every numeric leaf under `at` (JSON pointer), its arrays' elements included; the
// informational memory summary, which no reader uses, left out.
void numeric_leaves(const nlohmann::json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_number()) {
    out.push_back(at);
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items())
      if (key != "memory") numeric_leaves(value, at + "/" + key, out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      numeric_leaves(j[i], at + "/" + std::to_string(i), out);
  }
}

// The parts of a plan a section's test mutates: its top level, pool and config; its
// process groups, units and parameter groups; three segments; one buffer of each role;
// one op of each kind.
std::vector<std::string> section_leaves(const nlohmann::json& plan, const std::string& section) {
  std::vector<std::string> leaves;
  if (section == "header") {
    for (const auto& [key, value] : plan.items())
      if (value.is_number() || key == "pool" || key == "config")
        numeric_leaves(value, "/" + key, leaves);
  } else if (section == "groups") {
    for (const char* key : {"process_groups", "units", "groups"})
      numeric_leaves(plan[key], std::string("/") + key, leaves);
  } else if (section == "segments") {
    // The root's first segment (the embedding), the first layer's and the last (the
    // output layer and loss, with their BF16 GEMMs).
    const std::size_t last = plan["segments"].size() - 1;
    for (const std::size_t i : {std::size_t{0}, std::size_t{1}, last})
      numeric_leaves(plan["segments"][i], "/segments/" + std::to_string(i), leaves);
  } else {
    const std::string tag = section == "buffers" ? "role" : "kind";
    std::set<std::string> seen;
    for (std::size_t i = 0; i < plan[section].size(); ++i) {
      if (seen.insert(plan[section][i][tag].get<std::string>()).second)
        numeric_leaves(plan[section][i], "/" + section + "/" + std::to_string(i), leaves);
    }
  }
  return leaves;
}

struct SectionCase {
  std::size_t config;
  std::string section;
};

class ExtremeNumbers : public ::testing::TestWithParam<SectionCase> {};

// Each numeric leaf of the section set to each extreme, one at a time: refused, or valid
// and sane on every consumer.
TEST_P(ExtremeNumbers, AreRefusedOrSane) {
  const BaseConfig& base = base_configs()[GetParam().config];
  const nlohmann::json plan = base_plan(base);
  const std::vector<nlohmann::json> extremes = {
      -1, 0, int64_t{1} << 31, int64_t{1} << 44, std::numeric_limits<int64_t>::max(), 0.5, 1e300};
  int refused = 0, valid = 0;
  for (const std::string& leaf : section_leaves(plan, GetParam().section)) {
    for (const nlohmann::json& value : extremes) {
      nlohmann::json j = plan;
      j[nlohmann::json::json_pointer(leaf)] = value;
      (outcome(j, base.name + " " + leaf + " = " + value.dump()) == "valid" ? valid : refused) += 1;
    }
  }
  EXPECT_GT(refused, 0);
  RecordProperty("valid", valid);
  RecordProperty("refused", refused);
}

std::vector<SectionCase> section_cases() {
  std::vector<SectionCase> cases;
  for (std::size_t c = 0; c < base_configs().size(); ++c)
    for (const char* section : {"header", "groups", "segments", "buffers", "ops"})
      cases.push_back({c, section});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Plans, ExtremeNumbers, ::testing::ValuesIn(section_cases()),
                         [](const ::testing::TestParamInfo<SectionCase>& param) {
                           return base_configs()[param.param.config].name + "_" +
                                  param.param.section;
                         });

}  // namespace
}  // namespace shardplan::testing
