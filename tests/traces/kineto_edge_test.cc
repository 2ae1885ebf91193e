// Traces that bend the usual shape: no profiler steps, a module called twice in one
// pass, checkpointing around FSDP units, missing or odd metadata, older field spellings.
// Each is built here as JSON, small enough to work out by hand (times in µs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tests/expect_input_error.h"
#include "tests/run_command.h"
#include "traces/trace_import.h"

namespace shardplan::testing {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

json range(const std::string& name, const std::string& cat, int tid, double ts, double dur,
           json args = nullptr) {
  json e = {{"ph", "X"},  {"cat", cat}, {"name", name}, {"pid", 100},
            {"tid", tid}, {"ts", ts},   {"dur", dur}};
  if (!args.is_null()) e["args"] = std::move(args);
  return e;
}

// A runtime launch at `ts` on `tid` and its kernel on stream 7 (or `stream`).
void launch(json& events, int correlation, int tid, double ts, double start, double end,
            const std::string& kernel = "gemm", json kernel_args = json::object(),
            const std::string& cat = "kernel") {
  events.push_back(
      range("cudaLaunchKernel", "cuda_runtime", tid, ts, 1, {{"correlation", correlation}}));
  kernel_args["correlation"] = correlation;
  if (!kernel_args.contains("stream")) kernel_args["stream"] = 7;
  json k = range(kernel, cat, kernel_args["stream"].get<int>(), start, end - start, kernel_args);
  k["pid"] = 0;
  events.push_back(std::move(k));
}

ImportedTrace import_json(const json& doc, const std::string& name) {
  const std::string path = write_temp_file(name, doc.dump());
  return make_kineto_importer()->import(path, {});
}

bool has_warning(const ImportedTrace& t, const std::string& text) {
  return std::any_of(t.warnings.begin(), t.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

TEST(KinetoEdges, SharedModuleCalledTwiceStaysInItsPass) {
  // Model_0 runs Embed_0, Block_0, Block_0 again (a shared layer), Head_0.
  json ev = json::array();
  ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 1000));
  ev.push_back(range("nn.Module: Model_0", "python_function", 1, 10, 400));
  double t = 20;
  int c = 0;
  for (const char* m : {"Embed_0", "Block_0", "Block_0", "Head_0"}) {
    ev.push_back(range(std::string("nn.Module: ") + m, "python_function", 1, t, 50));
    launch(ev, ++c, 1, t + 10, t + 20, t + 30);
    t += 60;
  }
  const ImportedTrace tr = import_json({{"traceEvents", ev}}, "shared.json");
  EXPECT_THAT(tr.trace.modules, ElementsAre("Embed_0", "Block_0", "Head_0"));
  EXPECT_EQ(tr.trace.grad_accum, 1);
  int block_calls = 0;
  for (const StepEvent& e : tr.trace.events) {
    EXPECT_EQ(e.micro_batch, e.kind == StepEventKind::optimizer_step ? -1 : 0);
    if (e.kind == StepEventKind::pre_forward && e.module == 1) ++block_calls;
  }
  EXPECT_EQ(block_calls, 2);
  EXPECT_NEAR(tr.module_times[1].forward_seconds, 20e-6, 1e-12);  // two 10 µs kernels
}

TEST(KinetoEdges, WithoutProfilerStepsTheAutogradThreadIsNotTheStep) {
  // The autograd thread (2) runs more ops than the main thread (1).
  json ev = json::array();
  ev.push_back(range("nn.Module: Net_0", "python_function", 1, 0, 100));
  ev.push_back(range("nn.Module: A_0", "python_function", 1, 10, 40));
  ev.push_back(range("aten::mm", "cpu_op", 1, 15, 5, {{"Sequence number", 1}}));
  launch(ev, 1, 1, 16, 20, 30);
  ev.push_back(range("nn.Module: B_0", "python_function", 1, 50, 40));
  ev.push_back(range("aten::mm", "cpu_op", 1, 55, 5, {{"Sequence number", 2}}));
  launch(ev, 2, 1, 56, 60, 70);
  for (int i = 0; i < 2; ++i) {
    const double ts = 200 + 100.0 * i;
    ev.push_back(range("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 2, ts, 50,
                       {{"Sequence number", 2 - i}}));
    for (int k = 0; k < 3; ++k) ev.push_back(range("aten::mm", "cpu_op", 2, ts + 5 + 10 * k, 5));
    launch(ev, 10 + i, 2, ts + 40, ts + 45, ts + 65);
  }
  const ImportedTrace tr = import_json({{"traceEvents", ev}}, "nostep.json");
  EXPECT_TRUE(has_warning(tr, "no ProfilerStep# ranges"));
  EXPECT_THAT(tr.trace.modules, ElementsAre("A_0", "B_0"));
  EXPECT_EQ(tr.trace.recompute, Recompute::none);
  // Backward kernels go to the module of the forward op with the same Sequence number.
  EXPECT_NEAR(tr.module_times[0].backward_seconds, 20e-6, 1e-12);
  EXPECT_NEAR(tr.module_times[1].backward_seconds, 20e-6, 1e-12);
}

TEST(KinetoEdges, CheckpointedFsdpUnitRecomputeFromModuleRanges) {
  // fully_shard(checkpoint(block)): the re-run forward fires no FSDP hook, only the
  // block's nn.Module range on the autograd thread, inside the unit's backward window.
  json ev = json::array();
  ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 1000));
  ev.push_back(range("FSDP::pre_forward", "user_annotation", 1, 10, 5));
  ev.push_back(range("FSDP::pre_forward (layers.0)", "user_annotation", 1, 20, 5));
  ev.push_back(range("nn.Module: Block_0", "python_function", 1, 26, 30));
  launch(ev, 1, 1, 30, 40, 60);
  ev.push_back(range("FSDP::post_forward (layers.0)", "user_annotation", 1, 60, 5));
  ev.push_back(range("FSDP::post_forward", "user_annotation", 1, 70, 5));
  ev.push_back(range("FSDP::pre_backward", "user_annotation", 2, 100, 5));
  ev.push_back(range("FSDP::pre_backward (layers.0)", "user_annotation", 2, 110, 5));
  ev.push_back(range("nn.Module: Block_0", "python_function", 2, 120, 30));
  launch(ev, 2, 2, 125, 130, 150);  // the recompute's kernel
  launch(ev, 3, 2, 160, 160, 200);  // the backward's
  ev.push_back(range("FSDP::post_backward_accumulate (layers.0)", "user_annotation", 2, 210, 5));
  ev.push_back(range("FSDP::post_backward_accumulate", "user_annotation", 2, 230, 5));
  const ImportedTrace tr = import_json({{"traceEvents", ev}}, "fsdp_ac.json");
  EXPECT_THAT(tr.trace.modules, ElementsAre("", "layers.0"));
  EXPECT_EQ(tr.trace.recompute, Recompute::full);
  EXPECT_THAT(tr.trace.checkpointed, ElementsAre(false, true));
  EXPECT_NEAR(tr.module_times[1].recompute_seconds, 20e-6, 1e-12);
  EXPECT_NEAR(tr.module_times[1].backward_seconds, 40e-6, 1e-12);
}

TEST(KinetoEdges, MissingAndOddMetadata) {
  json ev = json::array();
  ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 100));
  ev.push_back(range("aten::mm", "cpu_op", 1, 5, 5));
  launch(ev, 1, 1, 6, 10, 20);
  // No distributedInfo: one GPU, and the timeline reads back.
  const ImportedTrace plain = import_json({{"traceEvents", ev}}, "single.json");
  EXPECT_EQ(plain.timeline.num_gpus, 1);
  EXPECT_NO_THROW(timeline_from_json(timeline_to_json(plain.timeline), "t"));
  // Wrong types are ignored, not an internal error.
  const ImportedTrace odd = import_json(
      {{"traceEvents", ev}, {"distributedInfo", nullptr}, {"deviceProperties", {{{"name", 5}}}}},
      "odd.json");
  EXPECT_EQ(odd.timeline.num_gpus, 1);
  EXPECT_EQ(odd.timeline.cluster, "");
  const ImportedTrace text =
      import_json({{"traceEvents", ev}, {"distributedInfo", {{"world_size", "2"}}}}, "text.json");
  EXPECT_EQ(text.timeline.num_gpus, 1);
}

TEST(KinetoEdges, OlderSpellingsAndMissingFields) {
  json ev = json::array();
  ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 100));
  ev.push_back(range("c10d::allreduce_", "Operator", 1, 5, 10));
  // A capitalised "Kernel" category (older Kineto) for a NCCL kernel named by its op.
  launch(ev, 1, 1, 6, 10, 30, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
         {{"stream", 14}}, "Kernel");
  // [memory] without totals, and an event without a time stamp.
  ev.push_back({{"ph", "i"},
                {"name", "[memory]"},
                {"pid", 100},
                {"tid", 1},
                {"ts", 8},
                {"args", {{"Device Type", 1}, {"Bytes", 512}}}});
  ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::add"}, {"pid", 100}, {"tid", 1}});
  const ImportedTrace tr = import_json({{"traceEvents", ev}}, "old.json");
  ASSERT_EQ(tr.collectives.size(), 1u);
  EXPECT_EQ(tr.collectives[0].kind, "all_reduce");
  EXPECT_EQ(tr.collectives[0].stream, 14);
  EXPECT_TRUE(has_warning(tr, "carry no sizes"));
  EXPECT_TRUE(has_warning(tr, "carry no 'Total Allocated'"));
  EXPECT_TRUE(has_warning(tr, "1 events without a time stamp"));
  EXPECT_TRUE(has_warning(tr, "(the first: /traceEvents/5 'aten::add': no ts)"));
  EXPECT_TRUE(tr.timeline.memory.empty());
}

// Values no profiler writes: a message of 2^63-1 elements (which became -2 bytes), a
// group of 0 ranks, a negative duration. Sizes read as unknown and the event with the
// impossible time is left out, each said in a warning; nothing absurd is copied out.
TEST(KinetoEdges, ImpossibleValuesAreWarnedNotCopied) {
  json ev = json::array();
  ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 100));
  ev.push_back(range("aten::mm", "cpu_op", 1, 5, 5));
  ev.push_back(range("aten::add", "cpu_op", 1, 7, -5));
  launch(ev, 1, 1, 6, 10, 30, "ncclKernel_AllReduce_RING_LL_Sum_float",
         {{"Collective name", "allreduce"},
          {"In msg nelems", 9223372036854775807LL},
          {"Out msg nelems", 9223372036854775807LL},
          {"Group size", 0},
          {"dtype", "Float"}});
  const ImportedTrace tr = import_json({{"traceEvents", ev}}, "absurd.json");
  ASSERT_EQ(tr.collectives.size(), 1u);
  EXPECT_EQ(tr.collectives[0].in_elements, -1);
  EXPECT_EQ(tr.collectives[0].group_size, -1);
  EXPECT_EQ(tr.collectives[0].bytes, 0);
  EXPECT_TRUE(has_warning(tr, "1 of 1 collectives carry no sizes"));
  EXPECT_TRUE(has_warning(
      tr,
      "3 sizes, counts or ids were not whole numbers in their physical range and were read "
      "as absent (the first: /traceEvents/4 'ncclKernel_AllReduce_RING_LL_Sum_float': 'Group "
      "size' 0 is outside [1, 2^20]"));
  EXPECT_TRUE(has_warning(tr,
                          "1 events without a time stamp ('ts') or with a time no profiler "
                          "writes (not finite, a negative duration, longer than a day) were "
                          "left out (the first: /traceEvents/2 'aten::add': dur -5 µs is "
                          "negative)"));
}

TEST(KinetoEdges, GpuEventsAloneAreAnError) {
  json ev = json::array();
  launch(ev, 1, 1, 6, 10, 20);
  ev.erase(ev.begin());  // the kernel without its launch
  const std::string path = write_temp_file("gpu_only.json", json{{"traceEvents", ev}}.dump());
  expect_input_error([&] { make_kineto_importer()->import(path, {}); }, "traceEvents", "no CPU ops",
                     path);
}

}  // namespace
}  // namespace shardplan::testing

namespace shardplan {
namespace {

// A memory sample's byte counts must be whole numbers in int64 range: the fuzzer found a
// float (1.38e133) there, whose conversion to int64 is undefined behaviour.
TEST(TimelineFile, MemoryBytesMustBeWholeAndInRange) {
  Timeline t;
  t.source = "measured";
  t.model = "tiny";
  t.cluster = "dgx-h100";
  t.num_gpus = 2;
  t.allocator = "caching";
  t.memory.push_back({0.0, 100, 200});
  nlohmann::json j = timeline_to_json(t);
  EXPECT_NO_THROW(timeline_from_json(j, "t.json"));
  for (const nlohmann::json& bad : {nlohmann::json(1.38506e133), nlohmann::json(2.5),
                                    nlohmann::json(-1), nlohmann::json(18446744073709551615ULL)}) {
    j["memory"][0][1] = bad;
    testing::expect_input_error([&] { timeline_from_json(j, "t.json"); }, "/memory/0",
                                "whole, non-negative byte counts", "t.json");
  }
}

}  // namespace
}  // namespace shardplan
