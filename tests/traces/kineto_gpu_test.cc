// The GPU passes (launch attribution, the host -> GPU clock, collectives, the memory
// curve) on a hand-built step (times in µs; host times below 200, GPU times from 1000).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/expect_input_error.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using ::testing::HasSubstr;

KinetoEvent range(std::string_view name, std::string_view cat, int64_t tid, double ts, double dur) {
  return {.name = name, .cat = cat, .tid = tid, .ts = ts, .dur = dur};
}

// A launch on thread 1 at `host` and its activity on stream 7 from `gpu` to `gpu_end`.
void launch(std::vector<KinetoEvent>& events, int64_t correlation, double host, double gpu,
            double gpu_end, std::string_view kernel = "gemm") {
  KinetoEvent call = range("cudaLaunchKernel", "cuda_runtime", 1, host, 1);
  call.correlation = correlation;
  KinetoEvent activity = range(kernel, "kernel", 7, gpu, gpu_end - gpu);
  activity.correlation = correlation;
  activity.stream = 7;
  events.push_back(call);
  events.push_back(activity);
}

class KinetoGpu : public ::testing::Test {
 protected:
  KinetoGpu() {
    std::vector<KinetoEvent>& ev = trace_.events;
    ev.push_back(range("ProfilerStep#1", "user_annotation", 1, 0, 100));
    ev.push_back(range("Optimizer.step#SGD.step", "cpu_op", 1, 80, 15));
    launch(ev, 1, 10, 1000, 1010);
    launch(ev, 2, 20, 1050, 1060);
    launch(ev, 3, 25, 1300, 1400, "ncclKernel_AllReduce_RING_LL_Sum_float");
    launch(ev, 4, 30, 1040, 1045);  // launched later, runs earlier (another queue)
    launch(ev, 5, 85, 1500, 1510);
    launch(ev, 6, 150, 1600, 1610);  // launched after the step
    trace_.metadata = {{"distributedInfo", {{"world_size", 4}}},
                       {"deviceProperties", {{{"name", "NVIDIA H100"}}}}};
    step_ = choose_step(trace_.events, "", "t.json").step;
    cpu_ = index_cpu_events(trace_.events, step_);
    calls_.forward = number_forward_calls({{.module = 0, .begin = 5, .end = 22, .tid = 1}});
  }

  GpuActivity import() const {
    return import_gpu_activity(trace_, step_, cpu_, calls_, {"Block_0"}, "t.json");
  }

  KinetoTrace trace_;
  KinetoStep step_;
  CpuIndex cpu_;
  ModuleCalls calls_;
};

TEST_F(KinetoGpu, LaunchesAreAttributedByWhatIsAroundThem) {
  EXPECT_EQ(attribute_launch(trace_.events, step_, cpu_, calls_, 1, 10).phase, "forward");
  EXPECT_EQ(attribute_launch(trace_.events, step_, cpu_, calls_, 1, 10).module, 0);
  EXPECT_EQ(attribute_launch(trace_.events, step_, cpu_, calls_, 1, 85).phase, "optimizer_step");
  EXPECT_EQ(attribute_launch(trace_.events, step_, cpu_, calls_, 1, 30).phase, "other");
  // A forward call holds only launches from the step's thread.
  EXPECT_EQ(attribute_launch(trace_.events, step_, cpu_, calls_, 2, 10).phase, "other");
}

// Compute kernels' time by class: the three GEMMs of the step, the one launched inside
// Optimizer.step counted as optimizer work whatever its name, the NCCL kernel not at all.
TEST_F(KinetoGpu, KernelTimeByClass) {
  const KernelClassSeconds k = import().kernel_seconds;
  EXPECT_NEAR(k.gemm, 25e-6, 1e-12);
  EXPECT_NEAR(k.optimizer, 10e-6, 1e-12);
  EXPECT_EQ(k.attention, 0.0);
  EXPECT_EQ(k.elementwise, 0.0);
  EXPECT_EQ(k.copies, 0.0);
}

TEST_F(KinetoGpu, TheStepsActivitiesByGpuStart) {
  const GpuActivity gpu = import();
  const Timeline& tl = gpu.timeline;
  EXPECT_EQ(tl.source, "profiled");
  EXPECT_EQ(tl.num_gpus, 4);
  EXPECT_EQ(tl.cluster, "NVIDIA H100");
  ASSERT_EQ(tl.ops.size(), 5u);  // not the one launched after the step
  EXPECT_EQ(tl.ops[0].name, "Block_0: gemm");
  EXPECT_EQ(tl.ops[1].kind, "other");  // launched at 30, after the forward call
  EXPECT_NEAR(tl.ops[1].start, 40e-6, 1e-12);
  EXPECT_EQ(tl.ops[3].stream, "rs");
  EXPECT_EQ(tl.ops[4].kind, "optimizer_step");
  EXPECT_NEAR(tl.summary.step_seconds, 510e-6, 1e-12);
  EXPECT_NEAR(gpu.module_times[0].forward_seconds, 20e-6, 1e-12);
  EXPECT_EQ(gpu.module_times[0].kernels, 2);
  ASSERT_EQ(gpu.collectives.size(), 1u);
  EXPECT_EQ(gpu.collectives[0].kind, "all_reduce");
  EXPECT_EQ(gpu.collectives[0].stream, 7);
  ASSERT_EQ(gpu.warnings.size(), 1u);
  EXPECT_THAT(gpu.warnings[0], HasSubstr("1 of 1 collectives carry no sizes"));
}

TEST_F(KinetoGpu, TheClockFollowsComputeLaunchesAndNeverGoesBack) {
  const GpuClock clock = import().clock;
  EXPECT_EQ(clock.origin, 1000);
  EXPECT_EQ(clock.seconds_at(5), 0);
  EXPECT_NEAR(clock.seconds_at(10), 0, 1e-12);
  // The all-reduce launched at 25 waits for its peers: it does not move the clock.
  EXPECT_NEAR(clock.seconds_at(27), 50e-6, 1e-12);
  // The kernel launched at 30 started at 1040, before the one launched at 20.
  EXPECT_NEAR(clock.seconds_at(35), 50e-6, 1e-12);
  EXPECT_NEAR(clock.seconds_at(90), 500e-6, 1e-12);
}

// A kernel cannot start before the call that launched it beyond the few µs the CPU and
// GPU clocks disagree: one that does is left out, or the step would stretch back to it.
TEST_F(KinetoGpu, AKernelFarBeforeItsLaunchIsLeftOut) {
  launch(trace_.events, 7, 40, 1000 - 5e6, 1000 - 5e6 + 10);  // 5 s before its launch at 40
  cpu_ = index_cpu_events(trace_.events, step_);
  GpuActivity gpu = import();
  EXPECT_EQ(gpu.timeline.ops.size(), 5u);  // as without it
  EXPECT_NEAR(gpu.timeline.summary.step_seconds, 510e-6, 1e-12);
  EXPECT_THAT(gpu.warnings[0],
              HasSubstr("1 GPU activities start more than 1000 µs before the runtime call that "
                        "launched them"));
  EXPECT_THAT(gpu.warnings[0], HasSubstr("the first: 'gemm' starts at -4999000.000 µs"));
  // 999 µs ahead of its launch (at 90) is within the skew: kept, and the step starts there.
  launch(trace_.events, 8, 90, 90 - 999, 90 - 990);
  cpu_ = index_cpu_events(trace_.events, step_);
  gpu = import();
  EXPECT_EQ(gpu.timeline.ops.size(), 6u);
  EXPECT_NEAR(gpu.timeline.summary.step_seconds, (1510 - (90 - 999)) * 1e-6, 1e-12);
}

// Work launched in the step but run days later: no step is that long, and the timeline
// written would not read back.
TEST_F(KinetoGpu, AStepLongerThanADayIsRefused) {
  launch(trace_.events, 7, 40, 1000 + 2 * 86400e6, 1000 + 2 * 86400e6 + 10);
  cpu_ = index_cpu_events(trace_.events, step_);
  testing::expect_input_error([&] { import(); }, "traceEvents",
                              "the GPU work of ProfilerStep#1 spans 172800 s, longer than a day",
                              "t.json");
}

TEST(KinetoMemory, CudaSamplesInTimeOrderOnTheGpuClock) {
  const auto memory = [](double ts, int64_t device, int64_t allocated, int64_t reserved) {
    KinetoEvent e{.name = "[memory]", .cat = "cpu_instant_event", .ph = 'i', .ts = ts};
    e.device_type = device;
    e.total_allocated = allocated;
    e.total_reserved = reserved;
    return e;
  };
  const std::vector<KinetoEvent> events = {memory(30, 1, 300, 512), memory(12, 1, 100, 256),
                                           memory(15, 0, 999, 999), memory(40, 1, -1, -1),
                                           memory(500, 1, 999, 999)};  // the last is after the step
  const GpuClock clock{.origin = 1000, .host_to_gpu = {{10, 1000}, {20, 1050}}};
  const MemoryCurve curve = import_memory(events, {"ProfilerStep#1", 0, 100, 1}, clock);
  ASSERT_EQ(curve.samples.size(), 2u);
  EXPECT_NEAR(curve.samples[0].time, 0, 1e-12);
  EXPECT_EQ(curve.samples[0].allocated, 100);
  EXPECT_NEAR(curve.samples[1].time, 50e-6, 1e-12);
  EXPECT_EQ(curve.peak_allocated_bytes, 300);
  EXPECT_EQ(curve.peak_reserved_bytes, 512);
  ASSERT_EQ(curve.warnings.size(), 1u);
  EXPECT_THAT(curve.warnings[0], HasSubstr("1 CUDA [memory] events carry no 'Total Allocated'"));
}

}  // namespace
}  // namespace shardplan::kineto
