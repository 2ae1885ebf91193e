// End-to-end tests of `shardplan models`, `shardplan clusters` and `shardplan version`:
// the real binary, its --json output checked against published figures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

// `models --json` / `clusters --json` are the same every time: run each once.
const nlohmann::json& models_json() {
  static const nlohmann::json json = [] {
    const CommandResult r = run_shardplan({"models", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return stdout_json(r);
  }();
  return json;
}

const nlohmann::json& clusters_json() {
  static const nlohmann::json json = [] {
    const CommandResult r = run_shardplan({"clusters", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return stdout_json(r);
  }();
  return json;
}

nlohmann::json find_by_name(const nlohmann::json& list, const std::string& name) {
  for (const nlohmann::json& entry : list) {
    if (entry.value("name", "") == name) return entry;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// models

// Published parameter counts (see each zoo file's "source"): model cards and papers.
struct PublishedModel {
  std::string name;
  double total_parameters;
  double active_parameters;  // = total for dense models
  int64_t num_layers;
  int64_t hidden_size;
  int64_t vocab_size;
};

void PrintTo(const PublishedModel& m, std::ostream* os) {
  *os << m.name;
}

class ZooModelTest : public ::testing::TestWithParam<PublishedModel> {};

TEST_P(ZooModelTest, ParameterCountsMatchPublishedWithinHalfAPercent) {
  const PublishedModel& published = GetParam();
  const nlohmann::json model = find_by_name(models_json().at("models"), published.name);
  ASSERT_TRUE(model.is_object()) << published.name << " missing from `models --json`";

  const double total = static_cast<double>(model.at("parameters").get<int64_t>());
  const double active = model.at("active_parameters").get<double>();
  EXPECT_NEAR(total, published.total_parameters, 0.005 * published.total_parameters);
  EXPECT_NEAR(active, published.active_parameters, 0.005 * published.active_parameters);
  EXPECT_LE(active, total);
  EXPECT_EQ(model.at("num_layers").get<int64_t>(), published.num_layers);
  EXPECT_EQ(model.at("hidden_size").get<int64_t>(), published.hidden_size);
  EXPECT_EQ(model.at("vocab_size").get<int64_t>(), published.vocab_size);
  EXPECT_FALSE(model.at("source").get<std::string>().empty());
}

// `tiny` has no published count: work it out from its architecture (a 4-layer Llama:
// vocab 512, hidden 64, 4 heads of 16 with 2 KV heads, SwiGLU FFN 176, RMSNorm, untied).
double tiny_parameters() {
  const double vocab = 512, hidden = 64, kv = 2 * 16, ffn = 176, layers = 4;
  const double attention = hidden * hidden * 2 + hidden * kv * 2;  // q, o; k, v
  const double mlp = 3 * hidden * ffn;                             // gate, up, down
  const double norms = 2 * hidden;
  return layers * (attention + mlp + norms) + 2 * vocab * hidden + hidden;
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ZooModelTest,
    ::testing::Values(
        // Llama 3 model card: 8.03 B.
        PublishedModel{"llama3-8b", 8.03e9, 8.03e9, 32, 4096, 128256},
        // Llama 3 model card: 70.55 B.
        PublishedModel{"llama3-70b", 70.55e9, 70.55e9, 80, 8192, 128256},
        // Llama 3.1 405B: 405.85 B (arXiv 2407.21783 and config.json).
        PublishedModel{"llama3.1-405b", 405.85e9, 405.85e9, 126, 16384, 128256},
        // Mixtral of Experts (arXiv 2401.04088): 46.7 B total, 12.9 B active.
        PublishedModel{"mixtral-8x7b", 46.70e9, 12.88e9, 32, 4096, 32000},
        // GPT-3 (arXiv 2005.14165) 175 B; 174.6 B with its exact vocabulary and positions.
        PublishedModel{"gpt3-175b", 174.6e9, 174.6e9, 96, 12288, 50257},
        PublishedModel{"tiny", tiny_parameters(), tiny_parameters(), 4, 64, 512}),
    [](const ::testing::TestParamInfo<PublishedModel>& param_info) {
      std::string name = param_info.param.name;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(ModelsCommandTest, TinyParameterCountIsExact) {
  const nlohmann::json model = find_by_name(models_json().at("models"), "tiny");
  ASSERT_TRUE(model.is_object());
  EXPECT_EQ(model.at("parameters").get<int64_t>(), static_cast<int64_t>(tiny_parameters()));
}

TEST(ModelsCommandTest, ListsExactlyTheZooModelsWithTheirFamilies) {
  const std::map<std::string, std::string> expected = {{"deepseek-v3", "moe"},
                                                       {"deepseek-v3-16b", "moe"},
                                                       {"gpt3-175b", "transformer"},
                                                       {"llama2-7b", "transformer"},
                                                       {"llama2-13b", "transformer"},
                                                       {"llama2-70b", "transformer"},
                                                       {"llama3.1-405b", "transformer"},
                                                       {"llama3-70b", "transformer"},
                                                       {"llama3-8b", "transformer"},
                                                       {"mixtral-8x7b", "moe"},
                                                       {"mpt-7b", "transformer"},
                                                       {"mpt-13b", "transformer"},
                                                       {"mpt-30b", "transformer"},
                                                       {"mpt-70b", "transformer"},
                                                       {"qwen3-30b-a3b", "moe"},
                                                       {"tiny", "transformer"},
                                                       {"tiny-moe", "moe"}};
  std::map<std::string, std::string> listed;
  for (const nlohmann::json& m : models_json().at("models")) {
    listed[m.at("name").get<std::string>()] = m.at("family").get<std::string>();
  }
  EXPECT_EQ(listed, expected);
}

// Every name `models` prints must be accepted by `--model`.
TEST(ModelsCommandTest, EveryListedModelLoadsByName) {
  for (const nlohmann::json& m : models_json().at("models")) {
    const std::string name = m.at("name").get<std::string>();
    // gpt3-175b accepts at most 2048 positions; the default sequence is longer.
    const CommandResult r =
        run_shardplan({"describe", "--model", name, "--seq-len", "2048", "--json"});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const nlohmann::json d = stdout_json(r);
    EXPECT_EQ(d.at("model").at("name"), name);
    EXPECT_EQ(d.at("summary").at("total_parameters"), m.at("parameters"));
  }
}

// ---------------------------------------------------------------------------------------
// clusters

// Datasheet figures per GPU: HBM as marketed (GiB; CUDA reports slightly less), dense
// BF16 and FP8 tensor peaks (0: no FP8 tensor cores), GPUs per NVLink domain.
struct PublishedCluster {
  std::string name;
  double hbm_gib;
  double bf16_dense_flops;
  double fp8_dense_flops;
  int64_t gpus_per_node;
};

void PrintTo(const PublishedCluster& c, std::ostream* os) {
  *os << c.name;
}

class ZooClusterTest : public ::testing::TestWithParam<PublishedCluster> {};

TEST_P(ZooClusterTest, FieldsAreSaneAndMatchDatasheets) {
  const PublishedCluster& published = GetParam();
  const nlohmann::json c = find_by_name(clusters_json().at("clusters"), published.name);
  ASSERT_TRUE(c.is_object()) << published.name << " missing from `clusters --json`";

  const auto hbm = static_cast<double>(c.at("hbm_bytes").get<int64_t>());
  EXPECT_GT(hbm, 0);
  // CUDA's device total sits 0.5-2 % under the marketed size in GiB.
  const double marketed = published.hbm_gib * 1024.0 * 1024.0 * 1024.0;
  EXPECT_LE(hbm, marketed);
  EXPECT_GE(hbm, 0.98 * marketed);

  const double bf16 = c.at("bf16_dense_flops").get<double>();
  const double fp8 = c.at("fp8_dense_flops").get<double>();
  EXPECT_NEAR(bf16, published.bf16_dense_flops, 0.01 * published.bf16_dense_flops);
  if (published.fp8_dense_flops == 0) {
    EXPECT_EQ(fp8, 0.0);
  } else {
    EXPECT_NEAR(fp8, published.fp8_dense_flops, 0.01 * published.fp8_dense_flops);
    EXPECT_NEAR(fp8, 2 * bf16, 0.01 * bf16);  // FP8 doubles the dense BF16 rate
  }

  EXPECT_EQ(c.at("gpus_per_node").get<int64_t>(), published.gpus_per_node);
  EXPECT_GT(c.at("sm_count").get<int64_t>(), 0);
  EXPECT_GT(c.at("hbm_bandwidth_bytes_per_s").get<double>(), 1e12);
  const double nvlink = c.at("intra_node_bandwidth_bytes_per_s").get<double>();
  const double nic = c.at("inter_node_bandwidth_bytes_per_s").get<double>();
  EXPECT_GT(nic, 0);
  EXPECT_GT(nvlink, nic);  // NVLink is faster than the NIC on every one of these
  const auto non_tensor = c.at("non_tensor_bytes").get<int64_t>();
  EXPECT_GT(non_tensor, 0);
  EXPECT_LT(static_cast<double>(non_tensor), 0.05 * hbm);
  EXPECT_FALSE(c.at("gpu").get<std::string>().empty());
  EXPECT_FALSE(c.at("description").get<std::string>().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ZooClusterTest,
    ::testing::Values(
        // A100 SXM4 80 GB: 312 TFLOP/s BF16 dense, no FP8 tensor cores.
        PublishedCluster{"dgx-a100", 80, 312e12, 0, 8},
        // A100 SXM4 40 GB: the same die.
        PublishedCluster{"dgx-a100-40gb", 40, 312e12, 0, 8},
        // H100 SXM5: 989.4 TFLOP/s BF16, 1978.9 FP8 dense.
        PublishedCluster{"dgx-h100", 80, 989.4e12, 1978.9e12, 8},
        // H200 SXM 141 GB: same Hopper tensor cores.
        PublishedCluster{"dgx-h200", 141, 989.4e12, 1978.9e12, 8},
        // GB200 NVL72: B200 at 2.5 PFLOP/s BF16, 5 FP8 dense; 72 GPUs in one NVLink domain.
        PublishedCluster{"gb200-nvl72", 186, 2.5e15, 5e15, 72},
        // H100 SXM 96 GB HBM2e (Meta's Grand Teton hosts).
        PublishedCluster{"h100-96gb", 96, 989.4e12, 1978.9e12, 8},
        // DGX B200: 180 GB, 2.25 PFLOP/s BF16 and 4.5 FP8 dense at 1000 W.
        PublishedCluster{"dgx-b200", 180, 2.25e15, 4.5e15, 8},
        // GB300 NVL72: 2.5 / 5 PFLOP/s dense; 288 GB HBM3e of which datacrunch's GB300
        // table lists 279 GB usable (CUDA reports 283254 MiB = 276.6 GiB).
        PublishedCluster{"gb300-nvl72", 279, 2.5e15, 5e15, 72},
        // MI300X: 192 GB HBM3, 1307.4 TFLOP/s BF16 and 2614.9 FP8 dense (ROCm mi300.md).
        PublishedCluster{"mi300x", 192, 1307.4e12, 2614.9e12, 8}),
    [](const ::testing::TestParamInfo<PublishedCluster>& param_info) {
      std::string name = param_info.param.name;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(ClustersCommandTest, ListsExactlyTheZooClusters) {
  std::set<std::string> names;
  for (const nlohmann::json& c : clusters_json().at("clusters")) {
    names.insert(c.at("name").get<std::string>());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"dgx-a100", "dgx-a100-40gb", "dgx-b200", "dgx-h100", "dgx-h200",
                                   "gb200-nvl72", "gb300-nvl72", "h100-96gb", "mi300x"}));
}

TEST(ClustersCommandTest, OnlyTheA100sLackFp8) {
  for (const nlohmann::json& c : clusters_json().at("clusters")) {
    const bool no_fp8 = c.at("fp8_dense_flops").get<double>() == 0;
    EXPECT_EQ(no_fp8, c.at("name") == "dgx-a100" || c.at("name") == "dgx-a100-40gb")
        << c.at("name");
  }
}

// describe reports the cluster's HBM as its capacity: the two commands agree.
TEST(ClustersCommandTest, DescribeCapacityIsTheClusterHbm) {
  const nlohmann::json c = find_by_name(clusters_json().at("clusters"), "gb200-nvl72");
  ASSERT_TRUE(c.is_object());
  const CommandResult r =
      run_shardplan({"describe", "--model", "tiny", "--cluster", "gb200-nvl72", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json d = stdout_json(r);
  EXPECT_EQ(d.at("memory").at("capacity_bytes").get<double>(),
            static_cast<double>(c.at("hbm_bytes").get<int64_t>()));
  // The cluster's context and workspaces, and the job's communicators: plan says the same.
  const CommandResult plan =
      run_shardplan({"plan", "--model", "tiny", "--cluster", "gb200-nvl72", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json device = stdout_json(plan).at("device_memory");
  EXPECT_EQ(d.at("memory").at("non_tensor_bytes").get<double>(),
            device.at("non_tensor_bytes").get<double>());
  EXPECT_EQ(device.at("breakdown").at("base_bytes").get<int64_t>(),
            c.at("non_tensor_bytes").get<int64_t>());
  EXPECT_GT(device.at("breakdown").at("nccl_bytes").get<int64_t>(), 0);
  EXPECT_EQ(d.at("cluster").at("gpu"), c.at("gpu"));
  // One node of the 72-GPU NVLink domain.
  EXPECT_EQ(d.at("cluster").at("num_gpus").get<int64_t>(), c.at("gpus_per_node").get<int64_t>());
  EXPECT_EQ(d.at("config").at("dp_shard").get<int64_t>(), 72);
}

// ---------------------------------------------------------------------------------------
// version

std::string project_version() {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/CMakeLists.txt");
  std::stringstream text;
  text << in.rdbuf();
  std::smatch match;
  const std::string s = text.str();
  if (std::regex_search(s, match, std::regex(R"(project\(shardplan VERSION ([0-9.]+))"))) {
    return match[1];
  }
  return "";
}

TEST(VersionCommandTest, JsonReportsVersionAndCudaBackendState) {
  const CommandResult r = run_shardplan({"version", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const nlohmann::json v = stdout_json(r);

  const std::string version = project_version();
  ASSERT_FALSE(version.empty());
  EXPECT_EQ(v.at("version"), version);

  // The toolkit is found whenever it sits at /usr/local/cuda (cmake/cuda_toolkit.cmake),
  // and the backend is built unless the build turned it off (the sanitizer build does).
  EXPECT_EQ(SHARDPLAN_CUDA_FOUND != 0,
            std::filesystem::exists("/usr/local/cuda/include/cuda_runtime.h"));
  EXPECT_EQ(v.at("cuda_backend"), SHARDPLAN_CUDA_ENABLED != 0);
  if (SHARDPLAN_CUDA_ENABLED) {
    EXPECT_GT(v.at("cuda_runtime_version").get<int64_t>(), 0);
    EXPECT_GT(v.at("nccl_version").get<int64_t>(), 0);
  }
  // No device: zero devices and a reason; a device: no error.
  const auto devices = v.at("cuda_devices").get<int64_t>();
  const std::string error = v.at("cuda_device_error").get<std::string>();
  if (!std::filesystem::exists("/dev/nvidia0")) {
    EXPECT_EQ(devices, 0);
    EXPECT_FALSE(error.empty());
  }
  EXPECT_EQ(devices == 0, !error.empty()) << devices << " devices, error '" << error << "'";
}

TEST(VersionCommandTest, VersionFlagMatchesVersionCommand) {
  const CommandResult r = run_shardplan({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("shardplan " + project_version()));
}

}  // namespace
}  // namespace shardplan::testing
