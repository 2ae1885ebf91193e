#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace shardplan {

// Closed intervals [begin, end] (a launch at a range's last microsecond is inside it);
// finds the innermost (latest-starting) one around a time. Nesting is allowed: a prefix
// maximum of the ends bounds the backward scan.
class IntervalIndex {
 public:
  void add(double begin, double end, int64_t value) { items_.push_back({begin, end, value}); }
  void finish() {
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    max_end_.resize(items_.size());
    double m = -1e300;
    for (std::size_t i = 0; i < items_.size(); ++i) max_end_[i] = m = std::max(m, items_[i].end);
  }
  // The value of the innermost interval holding t, or nullopt.
  std::optional<int64_t> innermost(double t) const {
    auto it = std::upper_bound(items_.begin(), items_.end(), t,
                               [](double x, const Item& item) { return x < item.begin; });
    for (auto i = static_cast<std::ptrdiff_t>(it - items_.begin()) - 1; i >= 0; --i) {
      const auto k = static_cast<std::size_t>(i);
      if (max_end_[k] < t) break;
      if (items_[k].end >= t) return items_[k].value;
    }
    return std::nullopt;
  }
  bool empty() const { return items_.empty(); }

 private:
  struct Item {
    double begin, end;
    int64_t value;
  };
  std::vector<Item> items_;
  std::vector<double> max_end_;
};

// Per-thread interval indexes.
class ThreadIndex {
 public:
  void add(int64_t tid, double begin, double end, int64_t value) {
    by_thread_[tid].add(begin, end, value);
  }
  void finish() {
    for (auto& [tid, index] : by_thread_) index.finish();
  }
  std::optional<int64_t> innermost(int64_t tid, double t) const {
    const auto it = by_thread_.find(tid);
    return it == by_thread_.end() ? std::nullopt : it->second.innermost(t);
  }

 private:
  std::map<int64_t, IntervalIndex> by_thread_;
};

}  // namespace shardplan
