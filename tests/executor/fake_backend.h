#pragma once

// An in-process backend for the replay engine's tests (ninja's FakeCommandRunner): it
// plays rank 0 of the plan's world without MPI, takes memory from the heap and records
// every allocation, runs nothing but records each op, advances a virtual clock by each
// op's cost, and makes the one check on real data that needs no other rank: a transient
// buffer, when read, still holds what was last written to it (so a dependency the plan
// lacks, or two live buffers sharing bytes, shows up as it would on a device).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "executor/replay.h"

namespace shardplan::testing {

class FakeBackend final : public ExecutorBackend {
 public:
  struct Allocation {
    int64_t bytes = 0;
    bool released = false;
  };
  struct Ran {
    int step = 0;
    int64_t op = 0;
    double start = 0;  // virtual seconds
  };

  explicit FakeBackend(int world_size) : world_size_(world_size) {}

  std::string_view name() const override { return "fake"; }
  int rank() const override { return 0; }
  int world_size() const override { return world_size_; }
  void prepare(const Plan& plan) override { plan_ = &plan; }
  std::byte* allocate(int64_t bytes) override {
    auto* p = static_cast<std::byte*>(std::calloc(static_cast<std::size_t>(bytes), 1));
    if (p == nullptr) throw std::bad_alloc();  // as a device that has no such memory
    allocations.push_back({bytes, false});
    index_[p] = allocations.size() - 1;
    return p;
  }
  void release(std::byte* data) override {
    allocations[index_.at(data)].released = true;
    std::free(data);
  }
  void initialise(const std::vector<BufferSpan>& persistent) override {
    initialised = persistent.size();
  }
  void begin_step(int step) override {
    step_ = step;
    written_.clear();
  }
  void run(const PlanOp& op, const std::vector<BufferSpan>& reads,
           const std::vector<BufferSpan>& writes) override {
    ran.push_back({step_, op.id, clock});
    if (on_run) on_run(op);
    for (const BufferSpan& r : reads) {
      if (r.buffer->persistent) continue;
      const auto it = written_.find(r.buffer->id);
      if (it == written_.end()) {
        throw IntegrityError("op '" + op.name + "' reads '" + r.buffer->name +
                             "' before anything wrote it");
      }
      if (!holds(r, it->second)) {
        throw IntegrityError("op '" + op.name + "' reads '" + r.buffer->name +
                             "', which another buffer overwrote");
      }
    }
    for (const BufferSpan& w : writes) {
      if (w.buffer->persistent || w.bytes == 0) continue;
      // A stamp unique to this write, in the buffer's first bytes.
      const uint64_t stamp = (static_cast<uint64_t>(step_) << 40) ^
                             (static_cast<uint64_t>(op.id) << 20) ^
                             static_cast<uint64_t>(w.buffer->id) ^ 0x9e3779b97f4a7c15ULL;
      stamp_into(w, stamp);
      written_[w.buffer->id] = stamp;
    }
    clock += op_seconds(op);
  }
  double now() override { return clock; }
  double max_over_ranks(double seconds) override { return seconds; }

  // A cost that tells ops apart: 1 µs plus 1 ns per KiB moved or per GFLOP.
  static double op_seconds(const PlanOp& op) {
    return 1e-6 + (op.bytes / 1024 + op.flops / 1e9) * 1e-9;
  }

  // Called as each op starts (a test's slow op, or a fault).
  std::function<void(const PlanOp&)> on_run;
  std::vector<Ran> ran;
  std::vector<Allocation> allocations;
  std::size_t initialised = 0;
  double clock = 0;

 private:
  // The stamp goes into a buffer's first and last bytes (up to 8 each), so another
  // buffer laid over either end shows.
  static void stamp_into(const BufferSpan& s, uint64_t stamp) {
    const auto n = static_cast<std::size_t>(std::min<int64_t>(8, s.bytes));
    std::memcpy(s.data, &stamp, n);
    std::memcpy(s.data + s.bytes - static_cast<int64_t>(n), &stamp, n);
  }
  static bool holds(const BufferSpan& s, uint64_t stamp) {
    const auto n = static_cast<std::size_t>(std::min<int64_t>(8, s.bytes));
    return s.bytes == 0 ||
           (std::memcmp(s.data, &stamp, n) == 0 &&
            std::memcmp(s.data + s.bytes - static_cast<int64_t>(n), &stamp, n) == 0);
  }

  int world_size_;
  int step_ = 0;
  const Plan* plan_ = nullptr;
  std::map<const std::byte*, std::size_t> index_;
  std::map<int64_t, uint64_t> written_;  // transient buffer -> last stamp
};

}  // namespace shardplan::testing
