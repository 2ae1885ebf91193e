// Calibration on a real GPU: a CUDA probe and one replayed plan, measured on an H200
// (tests/data/h200/SOURCE.md), fitted by `calibrate`, must predict the replay of another
// plan (other layers, sequence length, micro-batches and recompute) that the fit never saw.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"

namespace shardplan {
namespace {

using testing::run_shardplan;

const std::string kData = std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h200/";

double measured_step(const std::string& file) {
  std::ifstream in(kData + file);
  return nlohmann::json::parse(in).at("summary").at("step_seconds").get<double>();
}

// A plan of the cut-down Llama 3 8B: `layers` from its model file, then `--set` fields.
std::vector<std::string> job(int layers, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"--model",
                                   kData + "llama3-8b-" + std::to_string(layers) + "layers.json"};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

double predicted_step(const std::string& cluster, const std::vector<std::string>& config) {
  std::vector<std::string> args = {"simulate", "--cluster", cluster, "--gpus", "1", "--json"};
  args.insert(args.end(), config.begin(), config.end());
  const auto r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out).at("summary").at("step_seconds").get<double>();
}

TEST(CalibrateH200, ProbeAndOneReplayPredictAnotherPlanWithinFivePercent) {
  const std::string out = testing::write_temp_file("h200-calibrated.json", "");
  const auto r = run_shardplan({"calibrate", "--cluster", "dgx-h200", "--probe",
                                kData + "probe.json", "--plan", kData + "plan_a.json", "--measured",
                                kData + "measured_a.json", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  const nlohmann::json cluster = nlohmann::json::parse(in);
  // cuBLAS bf16 GEMMs of the plan's shapes ran at 680–854 TFLOP/s of 989.
  const double gemm = cluster.at("compute").at("gemm_efficiency").get<double>();
  EXPECT_GT(gemm, 0.7);
  EXPECT_LT(gemm, 0.95);
  // Plan b: 8 layers, 2 × 4096 tokens, selective recompute; 346.6 ms measured.
  const std::vector<std::string> b =
      job(8, {"seq_len=4096", "micro_batch=2", "grad_accum=2", "recompute=selective"});
  const double measured = measured_step("measured_b.json");
  const double before = predicted_step("dgx-h200", b) / measured - 1;
  const double after = predicted_step(out, b) / measured - 1;
  EXPECT_GT(std::abs(before), 0.15) << "the zoo constants were already right: " << before;
  EXPECT_LT(std::abs(after), 0.05) << "calibrated: " << after << ", zoo: " << before;
}

// The probe alone (GEMMs and copies, no timeline): the fit moves the plan-a replay closer.
TEST(CalibrateH200, ProbeAloneMovesTheReplayCloser) {
  const std::string out = testing::write_temp_file("h200-probe-only.json", "");
  const auto r = run_shardplan(
      {"calibrate", "--cluster", "dgx-h200", "--probe", kData + "probe.json", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> a = job(
      4, {"seq_len=8192", "micro_batch=1", "grad_accum=2", "sharding_strategy=optim_grads_params"});
  const double measured = measured_step("measured_a.json");
  EXPECT_LT(std::abs(predicted_step(out, a) / measured - 1),
            std::abs(predicted_step("dgx-h200", a) / measured - 1));
}

}  // namespace
}  // namespace shardplan
