// Compute calibration from a profiler trace of the planned job: each step's kernel time by
// class against the plan's work. Kernel names are the ones real vendors' libraries give;
// traces made here from known efficiencies must give them back.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "calibrate/calibrate.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "simulator/compute_model.h"
#include "tests/run_command.h"
#include "traces/trace_import.h"

namespace shardplan {
namespace {

TEST(ClassifyKernel, VendorKernelNames) {
  struct Case {
    const char* name;
    KernelClass want;
  };
  const Case cases[] = {
      // cuBLAS (Hopper), cuBLASLt's nvjet, CUTLASS (Ampere), hipBLASLt (MI300X)
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
       KernelClass::gemm},
      {"nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", KernelClass::gemm},
      {"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x3_nn_align4>(...)",
       KernelClass::gemm},
      {"Cijk_Ailk_Bljk_BBS_BH_MT256x256x64_MI16x16x16x1_SN", KernelClass::gemm},
      {"sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", KernelClass::fp8_gemm},
      // FlashAttention-2, FlashAttention-3 (a CUTLASS kernel), cuDNN's SDPA
      {"void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
       "cutlass::bfloat16_t>, true, true>(Flash_fwd_params)",
       KernelClass::attention},
      {"void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>",
       KernelClass::attention},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_"
       "kernel0_0",
       KernelClass::attention},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
       "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous "
       "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>",
       KernelClass::optimizer},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
       KernelClass::elementwise},
      {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
       KernelClass::elementwise},
  };
  for (const Case& c : cases) EXPECT_EQ(classify_kernel(c.name), c.want) << c.name;
}

struct Job {
  ClusterSpec cluster;
  Plan plan;
  ComputeWork work;  // one step's, at efficiency 1
};

Job job(int64_t gpus, const nlohmann::json& config) {
  const ModelSpec model = load_model("llama3-8b");
  ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, gpus);
  // The constants' fit, on work at efficiency 1: without the file's GEMM tables, under
  // which GEMMs run at their shapes' rates (calibrate leaves them out of what it fits).
  cluster.compute.gemm_tables.clear();
  Plan plan = build_plan(
      model, cluster, resolve_fsdp_config(fsdp_config_from_json(config, "t"), model, cluster, "t"));
  ComputeWork work;
  for (const PlanOp& op : plan.ops) {
    const ComputeWork w = compute_work(plan, op, cluster);
    work.bf16_gemm += w.bf16_gemm;
    work.attention += w.attention;
    work.memory += w.memory;
    work.optimizer += w.optimizer;
  }
  return {cluster, plan, work};
}

// Three steps whose class times scatter ±5 % around work ÷ efficiency: least squares on
// the summed times gives the efficiency back exactly.
TEST(TraceComputeFit, KnownEfficienciesComeBack) {
  const Job j = job(8, {{"seq_len", 4096}});
  std::vector<TracedStep> steps;
  for (const double scatter : {1.0, 1.05, 0.95}) {
    steps.push_back({.where = "synthetic",
                     .kernels = {.gemm = j.work.bf16_gemm / 0.6 * scatter,
                                 .attention = j.work.attention / 0.4 * scatter,
                                 .optimizer = j.work.optimizer / 0.5 * scatter,
                                 .elementwise = j.work.memory / 0.7 * scatter - 0.001,
                                 .copies = 0.001}});
  }
  ClusterSpec fitted = j.cluster;
  CalibrationReport report;
  fit_trace_compute(fitted, j.plan, steps, "synthetic", report);
  EXPECT_NEAR(fitted.compute.gemm_efficiency, 0.6, 1e-9);
  EXPECT_NEAR(fitted.compute.attention_efficiency, 0.4, 1e-9);
  EXPECT_NEAR(fitted.compute.optimizer_efficiency, 0.5, 1e-9);
  EXPECT_NEAR(fitted.compute.elementwise_efficiency, 0.7, 1e-9);
  EXPECT_DOUBLE_EQ(fitted.compute.fp8_gemm_efficiency, j.cluster.compute.fp8_gemm_efficiency);
  for (const FittedConstant& c : report.constants) {
    EXPECT_TRUE(c.fitted) << c.name;
    EXPECT_EQ(c.points, 3) << c.name;
    EXPECT_NEAR(c.rms_relative_error,
                std::sqrt((0.05 * 0.05 / 1.05 / 1.05 + 0.05 * 0.05 / 0.95 / 0.95) / 3.0), 1e-3)
        << c.name;
  }
  ASSERT_EQ(report.checks.size(), 1u);
  EXPECT_LT(report.checks[0].rms_after, report.checks[0].rms_before);
}

// FP8 kernels the plan has no FP8 work for, and planned work with no kernels, are kept
// and said so.
TEST(TraceComputeFit, ClassesWithoutBothSidesAreKept) {
  const Job j = job(8, {{"seq_len", 4096}});
  ClusterSpec fitted = j.cluster;
  CalibrationReport report;
  fit_trace_compute(
      fitted, j.plan,
      {{.where = "synthetic", .kernels = {.gemm = j.work.bf16_gemm / 0.6, .fp8_gemm = 0.01}}},
      "synthetic", report);
  EXPECT_NEAR(fitted.compute.gemm_efficiency, 0.6, 1e-9);
  EXPECT_DOUBLE_EQ(fitted.compute.attention_efficiency, j.cluster.compute.attention_efficiency);
  int kept = 0;
  for (const FittedConstant& c : report.constants) {
    if (c.name == "compute.fp8_gemm_efficiency") {
      EXPECT_FALSE(c.fitted);
      EXPECT_NE(c.note.find("no work for"), std::string::npos) << c.note;
      ++kept;
    }
    if (c.name == "compute.attention_efficiency") {
      EXPECT_FALSE(c.fitted);
      EXPECT_NE(c.note.find("no kernels of this class"), std::string::npos) << c.note;
      ++kept;
    }
  }
  EXPECT_EQ(kept, 2);
}

// A Kineto trace as the PyTorch profiler writes it: per step a ProfilerStep range, each
// kernel launched by a cudaLaunchKernel with its correlation id.
std::string kineto_trace(int64_t world_size,
                         const std::vector<std::pair<std::string, double>>& kernels, int steps) {
  nlohmann::json events = nlohmann::json::array();
  double host = 0, gpu = 10000;
  int64_t correlation = 1;
  for (int s = 0; s < steps; ++s) {
    const double step_start = host;
    const double launches = static_cast<double>(kernels.size()) * 3.0 + 10.0;
    events.push_back({{"ph", "X"},
                      {"cat", "user_annotation"},
                      {"name", "ProfilerStep#" + std::to_string(s + 1)},
                      {"pid", 100},
                      {"tid", 1},
                      {"ts", step_start},
                      {"dur", launches}});
    for (const auto& [name, micros] : kernels) {
      host += 3;
      events.push_back({{"ph", "X"},
                        {"cat", "cuda_runtime"},
                        {"name", "cudaLaunchKernel"},
                        {"pid", 100},
                        {"tid", 1},
                        {"ts", host},
                        {"dur", 1},
                        {"args", {{"correlation", correlation}}}});
      events.push_back({{"ph", "X"},
                        {"cat", "kernel"},
                        {"name", name},
                        {"pid", 0},
                        {"tid", 7},
                        {"ts", gpu},
                        {"dur", micros},
                        {"args", {{"device", 0}, {"stream", 7}, {"correlation", correlation}}}});
      gpu += micros + 1;
      ++correlation;
    }
    host = step_start + launches + 5;
  }
  return nlohmann::json(
             {{"schemaVersion", 1},
              {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", world_size}}},
              {"deviceProperties", {{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}}}},
              {"traceEvents", events}})
      .dump();
}

// End to end: `calibrate --plan --trace` on a trace whose kernels took the plan's work at
// known efficiencies writes a cluster file with them.
TEST(TraceComputeFit, CalibrateCommandReadsTheTrace) {
  const Job j = job(1, {{"seq_len", 2048}});
  const std::string plan_path =
      testing::write_temp_file("trace-fit-plan.json", plan_to_json(j.plan).dump());
  const std::vector<std::pair<std::string, double>> kernels = {
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
       j.work.bf16_gemm / 0.65 * 1e6},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3",
       j.work.attention / 0.45 * 1e6},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
       j.work.memory / 0.75 * 1e6},
      {"void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
       j.work.optimizer / 0.55 * 1e6}};
  const std::string trace = testing::write_temp_file("trace-fit.json", kineto_trace(1, kernels, 2));
  const std::string out = testing::write_temp_file("trace-fit-cluster.json", "");
  const auto r = testing::run_shardplan({"calibrate", "--cluster", "dgx-h100", "--plan", plan_path,
                                         "--trace", trace, "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  const nlohmann::json cluster = nlohmann::json::parse(in);
  const nlohmann::json& c = cluster.at("compute");
  // Kineto's microsecond times round the kernels' durations to 1e-3 µs.
  EXPECT_NEAR(c.at("gemm_efficiency").get<double>(), 0.65, 1e-4);
  EXPECT_NEAR(c.at("attention_efficiency").get<double>(), 0.45, 1e-4);
  EXPECT_NEAR(c.at("elementwise_efficiency").get<double>(), 0.75, 1e-4);
  EXPECT_NEAR(c.at("optimizer_efficiency").get<double>(), 0.55, 1e-4);
  EXPECT_NE(
      cluster.at("sources").at("compute.gemm_efficiency").get<std::string>().find("profiled steps"),
      std::string::npos);
  // The trace's world size must be the plan's.
  const std::string eight =
      testing::write_temp_file("trace-fit-8.json", kineto_trace(8, kernels, 1));
  const auto wrong = testing::run_shardplan(
      {"calibrate", "--cluster", "dgx-h100", "--plan", plan_path, "--trace", eight});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("the trace ran on 8 GPUs"), std::string::npos) << wrong.err;
  // A plan with nothing measured for it.
  const auto alone = testing::run_shardplan(
      {"calibrate", "--cluster", "dgx-h100", "--plan", plan_path, "--nccl-tests",
       std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl-tests/8xh100-g8/all_gather_ring.out"});
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--plan"), std::string::npos) << alone.err;
  // Without a plan, a trace with no NCCL kernel has nothing to give.
  const auto no_plan =
      testing::run_shardplan({"calibrate", "--cluster", "dgx-h100", "--trace", trace});
  EXPECT_NE(no_plan.exit_code, 0);
  EXPECT_NE(no_plan.err.find("with --plan, its compute kernels are fitted too"), std::string::npos)
      << no_plan.err;
}

}  // namespace
}  // namespace shardplan
