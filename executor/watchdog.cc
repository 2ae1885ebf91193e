#include "executor/watchdog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace shardplan {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(double timeout_seconds, std::string who,
                   std::function<std::string(int step, int64_t op)> describe)
    : timeout_seconds_(timeout_seconds),
      who_(std::move(who)),
      describe_(std::move(describe)),
      last_progress_ns_(now_ns()) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_one();
  thread_.join();
}

void Watchdog::progress(int step, int64_t op) {
  step_.store(step, std::memory_order_relaxed);
  op_.store(op, std::memory_order_relaxed);
  last_progress_ns_.store(now_ns(), std::memory_order_release);
}

void Watchdog::watch() {
  const auto timeout_ns = static_cast<int64_t>(timeout_seconds_ * 1e9);
  // Checks often enough that the job ends within ~10 % of the timeout after it passes.
  const auto poll =
      std::chrono::nanoseconds(std::clamp<int64_t>(timeout_ns / 10, 1'000'000, 1'000'000'000));
  std::unique_lock lock(mutex_);
  while (!stop_signal_.wait_for(lock, poll, [this] { return stopping_; })) {
    const int64_t idle_ns = now_ns() - last_progress_ns_.load(std::memory_order_acquire);
    if (idle_ns < timeout_ns) continue;
    const std::string line = fmt::format(
        "shardplan: error: {}: no progress for {:.1f} s while running {}; ending the job "
        "(execute --timeout sets the limit)\n",
        who_, static_cast<double>(idle_ns) * 1e-9,
        describe_(step_.load(std::memory_order_relaxed), op_.load(std::memory_order_relaxed)));
    // write(2): one unbuffered call, safe while the main thread is blocked in MPI.
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    std::_Exit(kTimedOutExitCode);
  }
}

}  // namespace shardplan
