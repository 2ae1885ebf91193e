// Every numeric field of a cluster file, a model file and a config set, one at a time, to
// values no real job has (zero, negatives, fractions, the edges of int64 and double).
// Each must be refused with an InputError that names that field, or be accepted and give
// a finite, non-negative prediction through the whole pipeline (resolve, plan, simulate).
// Nothing else may come out: no other exception, no NaN or infinity, no overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/cluster_spec.h"
#include "models/embedded_files.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/plan_builder.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

// The values tried in every numeric field.
std::vector<nlohmann::json> hostile_values() {
  return {0,
          -1,
          1,
          0.5,
          1e-300,
          1e30,
          1e308,
          2147483648,
          int64_t{1} << 53,
          int64_t{1} << 62,
          INT64_MAX,
          INT64_MIN,
          UINT64_MAX};
}

// The numeric leaves of a JSON document, as JSON pointers.
void numeric_leaves(const nlohmann::json& j, const std::string& path,
                    std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) numeric_leaves(value, path + "/" + key, out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      numeric_leaves(j[i], path + "/" + std::to_string(i), out);
  } else if (j.is_number()) {
    out.push_back(path);
  }
}

nlohmann::json zoo_file(const std::vector<EmbeddedFile>& files, std::string_view name) {
  for (const EmbeddedFile& f : files) {
    if (f.name == name) return parse_json_text(f.text, std::string(name));
  }
  ADD_FAILURE() << "no zoo file " << name;
  return {};
}

// Runs the pipeline; returns the InputError's field, or "" after checking the prediction.
std::string run_pipeline(const ModelSpec& model, const ClusterSpec& cluster,
                         const nlohmann::json& config) {
  try {
    const FsdpConfig resolved =
        resolve_fsdp_config(fsdp_config_from_json(config, "config"), model, cluster, "config");
    const Plan plan = build_plan(model, cluster, resolved);
    const TimelineSummary s = simulate(plan, cluster).summary;
    for (double v :
         {s.step_seconds, s.tokens_per_second_per_gpu, s.tflops_per_gpu, s.mfu, s.compute_seconds,
          s.exposed_all_gather_seconds, s.exposed_reduce_scatter_seconds}) {
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << v;
    }
    EXPECT_GT(s.step_seconds, 0);
    EXPECT_GT(s.peak_allocated_bytes, 0);
    EXPECT_GE(s.peak_reserved_bytes, s.peak_allocated_bytes);
    return "";
  } catch (const InputError& e) {
    EXPECT_FALSE(e.field().empty()) << e.what();
    EXPECT_EQ(e.what(), std::string(e.what()).substr(0, std::string(e.what()).find('\n')))
        << "one line";
    return e.field();
  }
}

TEST(HostileInput, EveryClusterFieldIsRefusedByNameOrPredictsFinitely) {
  const ModelSpec model = load_model("tiny");
  const nlohmann::json good = zoo_file(cluster_zoo_files(), "dgx-h100");
  std::vector<std::string> fields;
  numeric_leaves(good, "", fields);
  ASSERT_GE(fields.size(), 20u);
  int refused = 0, accepted = 0;
  for (const std::string& field : fields) {
    for (const nlohmann::json& value : hostile_values()) {
      SCOPED_TRACE(field + " = " + value.dump());
      nlohmann::json j = good;
      j[nlohmann::json::json_pointer(field)] = value;
      ClusterSpec cluster;
      try {
        cluster = cluster_from_json(j, "k.json");
      } catch (const InputError& e) {
        // A field checked against another is reported at the one that depends on it.
        // A measured rate is held below its peak at the measured field.
        const std::string blamed =
            field == "/gpu/sm_count"                    ? "/nccl/collective_sms"
            : field == "/gpu/hbm_bytes"                 ? "/non_tensor_bytes"
            : field == "/gpu/hbm_bandwidth_bytes_per_s" ? "/gpu/hbm_measured_bandwidth_bytes_per_s"
            : field == "/host_link/bandwidth_bytes_per_s"
                ? "/host_link/measured_bandwidth_bytes_per_s"
            : field.ends_with("node/bandwidth_bytes_per_s")
                ? field.substr(0, field.rfind('/')) + "/measured_bus_bandwidth_bytes_per_s"
                : field;
        if (e.field() != field) {
          EXPECT_EQ(e.field(), blamed) << e.what();
        }
        ++refused;
        continue;
      }
      EXPECT_EQ(run_pipeline(model, cluster, nlohmann::json::object()), "");
      ++accepted;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
}

TEST(HostileInput, EveryModelFieldIsRefusedByNameOrPredictsFinitely) {
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  const nlohmann::json good = zoo_file(model_zoo_files(), "tiny");
  std::vector<std::string> fields;
  numeric_leaves(good, "", fields);
  ASSERT_GE(fields.size(), 5u);
  for (const std::string& field : fields) {
    for (const nlohmann::json& value : hostile_values()) {
      SCOPED_TRACE(field + " = " + value.dump());
      nlohmann::json j = good;
      j[nlohmann::json::json_pointer(field)] = value;
      ModelSpec model;
      try {
        model = model_from_json(j, "m.json");
      } catch (const InputError& e) {
        // Divisibility errors name the field they test against (num_heads for a hidden
        // size they do not divide).
        EXPECT_FALSE(e.field().empty()) << e.what();
        continue;
      }
      EXPECT_EQ(run_pipeline(model, cluster, nlohmann::json::object()), "");
    }
  }
}

TEST(HostileInput, EveryConfigNumberIsRefusedByNameOrPredictsFinitely) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  for (const char* key :
       {"dp_shard", "dp_outer", "bucket_bytes", "forward_prefetch", "backward_prefetch",
        "max_live_grad_buffers", "micro_batch", "grad_accum", "seq_len"}) {
    for (const nlohmann::json& value : hostile_values()) {
      SCOPED_TRACE(std::string(key) + " = " + value.dump());
      const std::string field = run_pipeline(model, cluster, {{key, value}});
      // dp_shard × dp_outer must equal the GPUs: a bad dp_outer is reported at dp_outer or
      // at the product's first factor.
      if (!field.empty() && field != std::string("/") + key) {
        EXPECT_EQ(field, "/dp_shard") << key;
      }
    }
  }
}

// Sizes that are each in range but multiply past int64: refused by the parameter bound.
TEST(HostileInput, DimensionsWhoseProductOverflowsAreRefused) {
  nlohmann::json j = zoo_file(model_zoo_files(), "tiny");
  j["hidden_size"] = 16777216;
  j["ffn_hidden_size"] = 16777216;
  j["num_layers"] = 10000;
  j["vocab_size"] = 16777216;
  j["num_heads"] = 16;
  j["num_kv_heads"] = 16;
  try {
    model_from_json(j, "huge.json");
    FAIL() << "accepted a model of 10^18 parameters";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "huge.json");
    EXPECT_NE(e.reason().find("2^47"), std::string::npos) << e.what();
  }
}

// An explicit model whose parameter shapes add up past int64 (each one fits).
TEST(HostileInput, ExplicitShapesThatAddUpPastInt64AreRefused) {
  nlohmann::json children = nlohmann::json::array();
  for (int i = 0; i < 4; ++i) {
    children.push_back({{"name", "l" + std::to_string(i)},
                        {"type", "Linear"},
                        {"parameters", {{{"name", "weight"}, {"shape", {1 << 26, 1 << 26}}}}}});
  }
  const nlohmann::json j = {
      {"name", "e"}, {"family", "explicit"}, {"root", {{"children", children}}}};
  try {
    model_from_json(j, "e.json");
    FAIL() << "accepted 2^54 parameters";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/root") << e.what();
    EXPECT_NE(e.reason().find("2^47"), std::string::npos) << e.what();
  }
}

// A model whose only module costs nothing: its activation is allocated and freed at the
// same instant, which the allocator must see in that order (it used to see the free first:
// "free of a block that is not allocated").
TEST(HostileInput, AModuleOfZeroCostSimulates) {
  const nlohmann::json j = {
      {"name", "idle"},
      {"family", "explicit"},
      {"root",
       {{"children",
         {{{"name", "a"},
           {"type", "Custom"},
           {"parameters", {{{"name", "weight"}, {"shape", {256, 256}}}}},
           {"cost", {{"kind", "none"}, {"saved_per_token", {{"elements", 4}}}}}}}}}}};
  const ModelSpec model = model_from_json(j, "idle.json");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  for (const char* allocator : {"caching", "pool"}) {
    SCOPED_TRACE(allocator);
    const FsdpConfig resolved =
        resolve_fsdp_config(fsdp_config_from_json({{"allocator", allocator}, {"seq_len", 16}}, "c"),
                            model, cluster, "c");
    const Plan plan = build_plan(model, cluster, resolved);
    EXPECT_NO_THROW(simulate(plan, cluster));
  }
}

}  // namespace
}  // namespace shardplan
