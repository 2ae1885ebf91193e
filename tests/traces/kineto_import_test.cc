// Importing profiler traces: every file in ../shared/traces-real (facts from its SOURCE.md)
// and a hand-written FSDP2 step whose numbers are worked out below.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "tests/expect_input_error.h"
#include "tests/run_command.h"
#include "tests/shared_data.h"
#include "traces/kineto_reader.h"
#include "traces/trace_import.h"

namespace shardplan::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

const std::string kReal = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/";
const std::string kFsdp2 =
    std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/fsdp2_two_layers_trace.json";

ImportedTrace import(const std::string& path, ImportOptions options = {}) {
  return make_trace_importer("auto", path)->import(path, options);
}

std::vector<int64_t> sizes_of(const ImportedTrace& t, const std::string& kind) {
  std::vector<int64_t> sizes;
  for (const ImportedCollective& c : t.collectives) {
    if (c.kind == kind) sizes.push_back(c.in_elements);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

bool has_warning(const ImportedTrace& t, const std::string& text) {
  return std::any_of(t.warnings.begin(), t.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

// Index of the first event of `kind` for `module`, or -1.
int64_t event_index(const ImportedTrace& t, StepEventKind kind, const std::string& module) {
  for (std::size_t i = 0; i < t.trace.events.size(); ++i) {
    const StepEvent& e = t.trace.events[i];
    if (e.kind == kind && e.module >= 0 &&
        t.trace.modules[static_cast<std::size_t>(e.module)] == module)
      return static_cast<int64_t>(i);
  }
  return -1;
}

class ResnetDdpSteps : public ::testing::TestWithParam<std::string> {};

// SOURCE.md: each step of the DDP ResNet-50 trace all-reduces five buckets that sum to
// ResNet-50's 25,557,032 parameters, in fp32 over 2 ranks.
TEST_P(ResnetDdpSteps, FiveAllReduceBucketsSumToResnet50) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const ImportedTrace t = import(kReal + "nccl_data.json.gz", {.step = GetParam()});
  EXPECT_EQ(t.step, "ProfilerStep#" + GetParam());
  EXPECT_THAT(t.steps, ElementsAre("ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"));
  const std::vector<int64_t> sizes = sizes_of(t, "all_reduce");
  EXPECT_THAT(sizes, ElementsAre(2049000, 2431040, 6563840, 6637568, 7875584));
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), 25557032);
  for (const ImportedCollective& c : t.collectives) {
    EXPECT_EQ(c.group_size, 2);
    if (c.kind == "all_reduce") {
      EXPECT_EQ(c.dtype, "Float");
      EXPECT_EQ(c.stream, 40);
      EXPECT_EQ(c.phase, "backward");  // DDP's hooks fire during backward
    }
  }
  // No module ranges: said, and the GPU time still split by the user's ## phase ## ranges.
  EXPECT_TRUE(has_warning(t, "no module ranges"));
  EXPECT_TRUE(t.trace.modules.empty());
  std::set<std::string> kinds;
  for (const TimelineOp& op : t.timeline.ops) kinds.insert(op.kind);
  EXPECT_TRUE(kinds.count("forward") && kinds.count("backward") && kinds.count("optimizer_step"));
  // One optimizer step, though its Optimizer.step range runs on two threads.
  EXPECT_EQ(
      std::count_if(t.trace.events.begin(), t.trace.events.end(),
                    [](const StepEvent& e) { return e.kind == StepEventKind::optimizer_step; }),
      1);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, ResnetDdpSteps, ::testing::Values("4", "5", "6"));

TEST(KinetoImport, ResnetModulesRecomputeAndBackwardOrder) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const ImportedTrace t = import(kReal + "resnet_act_checkpoint.json.gz");
  EXPECT_EQ(t.step, "ProfilerStep#17");  // the last by default
  // Below DistributedDataParallel_0 -> ResNet_0, where the model branches.
  EXPECT_THAT(t.trace.modules,
              ElementsAre("Conv2d_0", "BatchNorm2d_0", "ReLU_0", "MaxPool2d_0",
                          "CheckpointWrapper_0", "CheckpointWrapper_1", "CheckpointWrapper_2",
                          "CheckpointWrapper_3", "AdaptiveAvgPool2d_0", "Linear_0"));
  // Exactly the four checkpointed stages are re-run inside backward.
  std::vector<std::string> checkpointed;
  for (std::size_t m = 0; m < t.trace.modules.size(); ++m)
    if (t.trace.checkpointed[m]) checkpointed.push_back(t.trace.modules[m]);
  EXPECT_THAT(checkpointed, ElementsAre("CheckpointWrapper_0", "CheckpointWrapper_1",
                                        "CheckpointWrapper_2", "CheckpointWrapper_3"));
  EXPECT_EQ(t.trace.recompute, Recompute::full);
  // Backward runs the modules in reverse; each recompute sits inside its module's backward.
  std::vector<std::string> backward_order;
  for (const StepEvent& e : t.trace.events)
    if (e.kind == StepEventKind::pre_backward)
      backward_order.push_back(t.trace.modules[static_cast<std::size_t>(e.module)]);
  std::vector<std::string> reversed(t.trace.modules.rbegin(), t.trace.modules.rend());
  EXPECT_EQ(backward_order, reversed);
  for (const std::string& m : checkpointed) {
    const int64_t pre = event_index(t, StepEventKind::pre_backward, m);
    const int64_t re = event_index(t, StepEventKind::recompute_forward, m);
    const int64_t post = event_index(t, StepEventKind::post_backward, m);
    EXPECT_LT(pre, re) << m;
    EXPECT_LT(re, post) << m;
    const auto index =
        std::find(t.trace.modules.begin(), t.trace.modules.end(), m) - t.trace.modules.begin();
    EXPECT_GT(t.module_times[static_cast<std::size_t>(index)].recompute_seconds, 0) << m;
  }
  // SOURCE.md: all-reduces of 2,873,320 and 8,816,192 bf16 elements (ResNet-18's
  // 11,689,512 parameters) over 8 ranks. 5 of 17 NCCL kernels lack args: their sizes come
  // from the record_param_comms op around the launch.
  EXPECT_THAT(sizes_of(t, "all_reduce"), ElementsAre(2873320, 8816192));
  for (const ImportedCollective& c : t.collectives) {
    EXPECT_EQ(c.group_size, 8);
    EXPECT_GE(c.in_elements, 0) << c.kind;
  }
  EXPECT_TRUE(has_warning(t, "no [memory] events"));
}

TEST(KinetoImport, EveryComputeKernelTimeIsAccountedOnce) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const ImportedTrace t = import(kReal + "resnet_act_checkpoint.json.gz");
  std::map<std::string, double> by_kind;
  for (const TimelineOp& op : t.timeline.ops)
    if (op.stream == "compute") by_kind[op.kind] += op.end - op.start;
  double forward = 0, backward = 0, recompute = 0;
  for (const ModuleTime& mt : t.module_times) {
    forward += mt.forward_seconds;
    backward += mt.backward_seconds;
    recompute += mt.recompute_seconds;
  }
  // Module times are the GPU ops of that phase attributed to a module. Every recompute
  // kernel runs inside a module; forward and backward also run work of no traced module
  // (DDP's buffer broadcast and gradient bucket copies, the loss), under 15 % here.
  EXPECT_NEAR(recompute, by_kind["recompute"], 1e-9);
  EXPECT_LE(forward, by_kind["forward"] + 1e-9);
  EXPECT_GT(forward, 0.85 * by_kind["forward"]);
  EXPECT_LE(backward, by_kind["backward"] + 1e-9);
  EXPECT_GT(backward, 0.85 * by_kind["backward"]);
}

TEST(KinetoImport, DepthGoesOneLevelIntoTheModules) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const ImportedTrace t = import(kReal + "resnet_act_checkpoint.json.gz", {.depth = 1});
  // CheckpointWrapper_k -> the ResNet stage it wraps (a Sequential); leaves stay as they
  // are. The profiler numbers instances of a class in order of first call, so the
  // downsample Sequentials inside the first blocks of stages 2 and 3 take 2 and 4.
  EXPECT_THAT(t.trace.modules, ElementsAre("Conv2d_0", "BatchNorm2d_0", "ReLU_0", "MaxPool2d_0",
                                           "Sequential_0", "Sequential_1", "Sequential_3",
                                           "Sequential_5", "AdaptiveAvgPool2d_0", "Linear_0"));
  const ImportedTrace deeper = import(kReal + "resnet_act_checkpoint.json.gz", {.depth = 2});
  EXPECT_EQ(std::count_if(deeper.trace.modules.begin(), deeper.trace.modules.end(),
                          [](const std::string& m) { return m.rfind("BasicBlock_", 0) == 0; }),
            8);  // ResNet-18: two BasicBlocks per stage
}

TEST(KinetoImport, DhenMemoryCurveAndUnsizedCollectives) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string path = kReal + "df_index_resolver.json.gz";
  const ImportedTrace t = import(path);
  // SOURCE.md: about 404 all-reduces per step, with no size args anywhere.
  EXPECT_EQ(sizes_of(t, "all_reduce").size(), 404u);
  EXPECT_TRUE(has_warning(t, "404 of 404 collectives carry no sizes"));
  EXPECT_TRUE(has_warning(t, "no module ranges"));
  // The memory curve is the step's CUDA [memory] events; its peaks are their maxima.
  const KinetoTrace raw = read_kineto_trace(path);
  double begin = 0, end = 0;
  for (const KinetoEvent& e : raw.events)
    if (e.name == t.step && e.cat == "user_annotation") begin = e.ts, end = e.ts + e.dur;
  int64_t samples = 0, peak_allocated = 0, peak_reserved = 0;
  for (const KinetoEvent& e : raw.events) {
    if (e.name != "[memory]" || e.device_type != 1 || e.ts < begin || e.ts > end) continue;
    ++samples;
    peak_allocated = std::max(peak_allocated, e.total_allocated);
    peak_reserved = std::max(peak_reserved, e.total_reserved);
  }
  EXPECT_GT(samples, 1000);
  EXPECT_EQ(static_cast<int64_t>(t.timeline.memory.size()), samples);
  EXPECT_EQ(t.timeline.summary.peak_allocated_bytes, peak_allocated);
  EXPECT_EQ(t.timeline.summary.peak_reserved_bytes, peak_reserved);
  EXPECT_GE(peak_reserved, peak_allocated);
  for (std::size_t i = 1; i < t.timeline.memory.size(); ++i)
    EXPECT_GE(t.timeline.memory[i].time, t.timeline.memory[i - 1].time);
}

// The hand-made FSDP2 step (tests/data/fsdp2_two_layers_trace.json from
// make_fsdp2_traces.py; times in µs):
//   compute stream 7: fwd 1060-1100 (layers.0) 1100-1140 (layers.1) 1140-1150 (root)
//                     bwd 1150-1170 (root) 1190-1270 (layers.1) 1270-1350 (layers.0),
//                     optimizer 1400-1420
//   all-gathers:  1010-1030 root, 1030-1060 l0, 1070-1090 l1, 1170-1190 l1, 1190-1220 l0
//   reduce-scatters: 1270-1300 l1, 1350-1380 l0, 1380-1390 root
// Step: 1010 -> 1420 = 410 µs. Compute busy: 110 + 160 + 20 = 290 µs. Exposed all-gather
// (no compute running): 20 + 30 + 0 + 20 + 0 = 70 µs; reduce-scatter: 0 + 30 + 10 = 40 µs.
TEST(KinetoImport, Fsdp2UnitsStepAndExposedCommunication) {
  const ImportedTrace t = import(kFsdp2);
  EXPECT_EQ(t.step, "ProfilerStep#3");
  EXPECT_THAT(t.module_source, HasSubstr("FSDP2"));
  EXPECT_THAT(t.trace.modules, ElementsAre("", "layers.0", "layers.1"));
  const TimelineSummary& s = t.timeline.summary;
  EXPECT_NEAR(s.step_seconds, 410e-6, 1e-12);
  EXPECT_NEAR(s.compute_seconds, 290e-6, 1e-12);
  EXPECT_NEAR(s.exposed_all_gather_seconds, 70e-6, 1e-12);
  EXPECT_NEAR(s.exposed_reduce_scatter_seconds, 40e-6, 1e-12);
  // Per unit: the innermost FSDP window around each launch.
  ASSERT_EQ(t.module_times.size(), 3u);
  EXPECT_NEAR(t.module_times[0].forward_seconds, 10e-6, 1e-12);
  EXPECT_NEAR(t.module_times[0].backward_seconds, 20e-6, 1e-12);
  for (std::size_t m : {1u, 2u}) {
    EXPECT_NEAR(t.module_times[m].forward_seconds, 40e-6, 1e-12);
    EXPECT_NEAR(t.module_times[m].backward_seconds, 80e-6, 1e-12);
  }
  std::vector<std::string> gathered;
  for (const ImportedCollective& c : t.collectives) {
    if (c.kind == "all_gather") gathered.push_back(c.module + "/" + c.phase);
    EXPECT_EQ(c.group_size, 4);
  }
  EXPECT_THAT(gathered, ElementsAre("/forward", "layers.0/forward", "layers.1/forward",
                                    "layers.1/backward", "layers.0/backward"));
  EXPECT_THAT(sizes_of(t, "reduce_scatter"), ElementsAre(400, 4000, 4000));
  // Events in time order: the root's forward wraps the layers'; backward in reverse.
  std::vector<std::string> order;
  for (const StepEvent& e : t.trace.events) {
    order.push_back(std::string(step_event_kind_name(e.kind)) + " " +
                    (e.module >= 0 ? t.trace.modules[static_cast<std::size_t>(e.module)] : "-"));
  }
  EXPECT_THAT(order, ElementsAre("pre_forward ", "pre_forward layers.0", "post_forward layers.0",
                                 "pre_forward layers.1", "post_forward layers.1", "post_forward ",
                                 "pre_backward ", "pre_backward layers.1", "post_backward layers.1",
                                 "pre_backward layers.0", "post_backward layers.0",
                                 "post_backward ", "final_callback -", "optimizer_step -"));
  // The earlier step's kernel is left out: 15 GPU activities in step 3.
  EXPECT_EQ(t.timeline.ops.size(), 15u);
  // Memory: allocations at host times 1025, 1065, 1300 land where the compute stream
  // reaches the compute work launched by then: nothing yet (0), the GEMM launched at 1040
  // (starts 1060: 50 µs), the GEMM launched at 1270 (starts 1270: 260 µs).
  ASSERT_EQ(t.timeline.memory.size(), 3u);
  EXPECT_NEAR(t.timeline.memory[0].time, 0.0, 1e-12);
  EXPECT_NEAR(t.timeline.memory[1].time, 50e-6, 1e-12);
  EXPECT_NEAR(t.timeline.memory[2].time, 260e-6, 1e-12);
  EXPECT_EQ(s.peak_allocated_bytes, 3000);
  EXPECT_EQ(s.peak_reserved_bytes, 4096);
}

// Two micro-batches; the first runs without gradient sync, so its backward has no
// post_backward_reduce and its windows close at post_backward_accumulate/reshard.
TEST(KinetoImport, Fsdp2GradientAccumulation) {
  const ImportedTrace t =
      import(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/fsdp2_grad_accum_trace.json");
  EXPECT_EQ(t.trace.grad_accum, 2);
  EXPECT_THAT(t.trace.modules, ElementsAre("", "layers.0"));
  std::vector<std::string> order;
  for (const StepEvent& e : t.trace.events) {
    order.push_back(
        fmt::format("{} {} {}", step_event_kind_name(e.kind), e.micro_batch,
                    e.module >= 0 ? t.trace.modules[static_cast<std::size_t>(e.module)] : "-"));
  }
  const std::vector<std::string> pass = {
      "pre_forward {} ",           "pre_forward {} layers.0", "post_forward {} layers.0",
      "post_forward {} ",          "pre_backward {} ",        "pre_backward {} layers.0",
      "post_backward {} layers.0", "post_backward {} ",       "final_callback {} -"};
  std::vector<std::string> expected;
  for (int mb : {0, 1})
    for (const std::string& p : pass) expected.push_back(fmt::format(fmt::runtime(p), mb));
  EXPECT_EQ(order, expected);
  // Each backward GEMM (40 µs) in its micro-batch's layer window; one reduce-scatter, in
  // the second micro-batch.
  EXPECT_NEAR(t.module_times[1].backward_seconds, 80e-6, 1e-12);
  ASSERT_EQ(t.collectives.size(), 1u);
  EXPECT_EQ(t.collectives[0].module, "layers.0");
  EXPECT_FALSE(has_warning(t, "pre_backward range(s) have no"));
}

TEST(KinetoImport, StreamsFollowTheCollectiveKind) {
  const ImportedTrace t = import(kFsdp2);
  std::map<std::string, std::set<std::string>> streams;
  for (const TimelineOp& op : t.timeline.ops) streams[op.kind].insert(op.stream);
  EXPECT_THAT(streams["all_gather"], UnorderedElementsAre("ag"));
  EXPECT_THAT(streams["reduce_scatter"], UnorderedElementsAre("rs"));
  EXPECT_THAT(streams["forward"], UnorderedElementsAre("compute"));
  EXPECT_THAT(streams["optimizer_step"], UnorderedElementsAre("compute"));
}

TEST(KinetoImport, UnknownStepListsTheSteps) {
  expect_input_error(
      [] { import(kFsdp2, {.step = "9"}); }, "--step",
      "no step 'ProfilerStep#9' in the trace (it has 'ProfilerStep#2', 'ProfilerStep#3')");
}

TEST(KinetoImport, TraceWithoutGpuEventsIsAnError) {
  const std::string path = write_temp_file("cpu_only.json", R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]})");
  expect_input_error([&] { import(path); }, "traceEvents", "no GPU kernels, copies or sets", path);
}

TEST(KinetoImport, ModelFileIsNotATrace) {
  const std::string path =
      write_temp_file("model.json", R"({"name": "m", "family": "explicit", "root": {}})");
  expect_input_error([&] { make_trace_importer("auto", path); }, "", "pass it as --model", path);
  expect_input_error([&] { make_trace_importer("nsys", path); }, "--format",
                     "unknown trace format");
  const std::string blank = write_temp_file("blank.json", "\n ");
  expect_input_error([&] { make_trace_importer("auto", blank); }, "", "only white space", blank);
  const std::string empty = write_temp_file("empty.json", "");
  expect_input_error([&] { make_trace_importer("auto", empty); }, "", "the file is empty", empty);
}

}  // namespace
}  // namespace shardplan::testing
