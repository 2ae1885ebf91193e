#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace shardplan {

// Ends the process when the replay stops making progress: a rank that died or hangs
// leaves the others waiting in a collective forever, and so does a plan whose ranks
// disagree on their collectives. Like PyTorch's NCCL watchdog (ProcessGroupNCCL's
// timeout), it bounds the wait instead of trusting every rank: after `timeout_seconds`
// without a call to progress() it prints one line naming this rank, what it was running
// and who can be at fault (`describe(step, op)`: another rank, in a collective; this
// rank, in its own compute) to stderr and exits with kTimedOutExitCode without
// MPI_Finalize, which makes mpirun end every other rank.
class Watchdog {
 public:
  static constexpr int kTimedOutExitCode = 124;  // as timeout(1)

  Watchdog(double timeout_seconds, std::string who,
           std::function<std::string(int step, int64_t op)> describe);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The replay reached `op` (-1: between ops) of `step`.
  void progress(int step, int64_t op);

 private:
  void watch();

  double timeout_seconds_;
  std::string who_;
  std::function<std::string(int, int64_t)> describe_;
  std::atomic<int64_t> last_progress_ns_;
  std::atomic<int> step_{0};
  std::atomic<int64_t> op_{-1};
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shardplan
