#include "pool/placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace shardplan::pool {

PoolAssignment with_status(const std::vector<PoolRequest>& requests, PoolAssignment result,
                           int64_t lower_bound, const PackOptions& options) {
  result.status = PackStatus::solved;
  result.proven_optimal = result.size_bytes == lower_bound;
  if (options.capacity && result.size_bytes > *options.capacity)
    result.status = over_capacity(requests, *options.capacity);
  return result;
}

std::vector<int64_t> distinct_times(const std::vector<PoolRequest>& requests) {
  std::vector<int64_t> times;
  times.reserve(2 * requests.size());
  for (const PoolRequest& r : requests) {
    times.push_back(r.begin);
    times.push_back(r.end);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  return times;
}

PlacedIndex::PlacedIndex(const std::vector<PoolRequest>& requests) : requests_(requests) {
  by_begin_.resize(requests.size());
  std::iota(by_begin_.begin(), by_begin_.end(), 0);
  std::stable_sort(by_begin_.begin(), by_begin_.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].begin < requests[b].begin;
  });
  position_.resize(requests.size());
  for (std::size_t p = 0; p < by_begin_.size(); ++p) position_[by_begin_[p]] = p;
  while (size_ < requests.size()) size_ *= 2;
  max_end_.assign(2 * size_, INT64_MIN);
}

void PlacedIndex::place(std::size_t request) {
  update(request, requests_[request].end);
}

void PlacedIndex::remove(std::size_t request) {
  update(request, INT64_MIN);
}

void PlacedIndex::update(std::size_t request, int64_t end) {
  std::size_t node = size_ + position_[request];
  max_end_[node] = end;
  for (node /= 2; node >= 1; node /= 2)
    max_end_[node] = std::max(max_end_[2 * node], max_end_[2 * node + 1]);
}

void PlacedIndex::overlapping(int64_t begin, int64_t end, std::vector<std::size_t>& out) const {
  out.clear();
  // Only positions whose begin is before `end` can overlap.
  const auto limit = static_cast<std::size_t>(
      std::lower_bound(by_begin_.begin(), by_begin_.end(), end,
                       [&](std::size_t r, int64_t t) { return requests_[r].begin < t; }) -
      by_begin_.begin());
  if (limit > 0) collect(1, 0, size_, limit, begin, out);
}

void PlacedIndex::collect(std::size_t node, std::size_t lo, std::size_t hi, std::size_t limit,
                          int64_t begin, std::vector<std::size_t>& out) const {
  if (lo >= limit || max_end_[node] <= begin) return;
  if (hi - lo == 1) {
    out.push_back(by_begin_[lo]);
    return;
  }
  const std::size_t mid = (lo + hi) / 2;
  collect(2 * node, lo, mid, limit, begin, out);
  collect(2 * node + 1, mid, hi, limit, begin, out);
}

TakenOffsets::TakenOffsets(const std::vector<PoolRequest>& requests) {
  const std::vector<int64_t> times = distinct_times(requests);
  const auto index = [&](int64_t t) {
    return static_cast<int32_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
  };
  section_lo_.resize(requests.size());
  section_hi_.resize(requests.size());
  bytes_.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    section_lo_[i] = index(requests[i].begin);
    section_hi_[i] = index(requests[i].end);
    bytes_[i] = requests[i].bytes;
  }
  while (leaves_ < times.size()) leaves_ *= 2;
  runs_.resize(2 * leaves_);
  below_.assign(2 * leaves_, 0);
}

void TakenOffsets::place(std::size_t request, int64_t offset) {
  const int64_t from = offset;
  const int64_t to = offset + bytes_[request];
  const auto add = [&](std::size_t node) {
    auto& runs = runs_[node];
    auto next = std::lower_bound(runs.begin(), runs.end(), from,
                                 [](const auto& run, int64_t value) { return run.first < value; });
    const bool joins_below = next != runs.begin() && std::prev(next)->second == from;
    const bool joins_above = next != runs.end() && next->first == to;
    if (joins_below && joins_above) {
      std::prev(next)->second = next->second;
      runs.erase(next);
    } else if (joins_below) {
      std::prev(next)->second = to;
    } else if (joins_above) {
      next->first = from;
    } else {
      runs.insert(next, {from, to});
    }
    for (std::size_t up = node; up >= 1; up /= 2) ++below_[up];
  };
  // The nodes that tile sections [lo, hi), bottom up.
  for (std::size_t lo = section_lo_[request] + leaves_, hi = section_hi_[request] + leaves_;
       lo < hi; lo /= 2, hi /= 2) {
    if (lo & 1) add(lo++);
    if (hi & 1) add(--hi);
  }
}

void TakenOffsets::taken(std::size_t request, std::vector<std::pair<int64_t, int64_t>>& out) const {
  out.clear();
  pieces_.clear();
  const auto from = static_cast<std::size_t>(section_lo_[request]);
  const auto to = static_cast<std::size_t>(section_hi_[request]);
  if (from < to) gather(1, 0, leaves_, from, to);
  // The nodes' lists, each sorted, merged pairwise (each round halves their number) into
  // one sorted list with touching ranges joined. (Merging the two shortest first, as
  // Huffman's code, measured slower: its heap costs more than the rounds save.)
  std::vector<Range>* source = &scratch_[0];
  source->clear();
  spans_.clear();
  for (const std::size_t node : pieces_) {
    spans_.emplace_back(source->size(), source->size() + runs_[node].size());
    source->insert(source->end(), runs_[node].begin(), runs_[node].end());
  }
  std::vector<Range>* target = &scratch_[1];
  while (spans_.size() > 1) {
    target->clear();
    std::size_t kept = 0;
    for (std::size_t k = 0; k < spans_.size(); k += 2) {
      const std::size_t begin = target->size();
      const auto [a, a_end] = spans_[k];
      const auto [b, b_end] = k + 1 < spans_.size() ? spans_[k + 1] : std::pair{a_end, a_end};
      union_of(source->data() + a, source->data() + a_end, source->data() + b,
               source->data() + b_end, *target);
      spans_[kept++] = {begin, target->size()};
    }
    spans_.resize(kept);
    std::swap(source, target);
  }
  out.assign(source->begin(), source->end());
}

void TakenOffsets::union_of(const Range* a, const Range* a_end, const Range* b, const Range* b_end,
                            std::vector<Range>& out) {
  const std::size_t first = out.size();
  const auto push = [&](const Range& range) {
    if (out.size() > first && range.first <= out.back().second) {
      out.back().second = std::max(out.back().second, range.second);
    } else {
      out.push_back(range);
    }
  };
  while (a != a_end && b != b_end) push(a->first <= b->first ? *a++ : *b++);
  while (a != a_end) push(*a++);
  while (b != b_end) push(*b++);
}

void TakenOffsets::gather(std::size_t node, std::size_t lo, std::size_t hi, std::size_t from,
                          std::size_t to) const {
  if (hi <= from || lo >= to || below_[node] == 0) return;
  if (!runs_[node].empty()) pieces_.push_back(node);
  if (hi - lo == 1) return;
  const std::size_t mid = (lo + hi) / 2;
  gather(2 * node, lo, mid, from, to);
  gather(2 * node + 1, mid, hi, from, to);
}

int64_t fit_offset(const std::vector<std::pair<int64_t, int64_t>>& taken, int64_t bytes,
                   int64_t alignment, int64_t limit, bool lowest) {
  int64_t best = -1;
  int64_t best_gap = INT64_MAX;
  int64_t cursor = 0;
  for (const auto& [start, stop] : taken) {
    const int64_t candidate = round_up(cursor, alignment);
    if (start > candidate && start - candidate >= bytes && candidate <= limit - bytes) {
      if (lowest) return candidate;
      if (start - cursor < best_gap) {
        best = candidate;
        best_gap = start - cursor;
      }
    }
    cursor = std::max(cursor, stop);
  }
  if (best >= 0) return best;
  const int64_t top = round_up(cursor, alignment);
  return top <= limit - bytes ? top : -1;
}

std::optional<PoolAssignment> place_in_order(const std::vector<PoolRequest>& requests,
                                             const std::vector<std::size_t>& order,
                                             int64_t default_alignment, Clock::time_point deadline,
                                             const std::atomic<bool>* finished_elsewhere,
                                             Clock::time_point soft_deadline) {
  PoolAssignment out;
  out.offsets.assign(requests.size(), 0);
  TakenOffsets index(requests);
  std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) ranges live with it
  std::size_t done = 0;
  for (std::size_t i : order) {
    // A placement costs up to milliseconds on inputs where thousands of buffers are live
    // at once; the clock, read every 64, costs nothing by comparison.
    if (++done % 64 == 0) {
      const Clock::time_point now = Clock::now();
      if (now > deadline) return std::nullopt;
      if (now > soft_deadline && finished_elsewhere != nullptr && finished_elsewhere->load())
        return std::nullopt;
    }
    const PoolRequest& r = requests[i];
    const int64_t alignment = alignment_of(r, default_alignment);
    taken.clear();
    if (occupies(r)) index.taken(i, taken);
    out.offsets[i] = fit_offset(taken, r.bytes, alignment, INT64_MAX, /*lowest=*/false);
    out.size_bytes = std::max(out.size_bytes, out.offsets[i] + r.bytes);
    if (occupies(r)) index.place(i, out.offsets[i]);
  }
  return out;
}

PoolAssignment place_online(const std::vector<PoolRequest>& requests, int64_t default_alignment) {
  PoolAssignment out;
  out.offsets.assign(requests.size(), 0);
  // (time, 0 free / 1 allocate, request): frees first at equal times (half-open).
  std::vector<std::tuple<int64_t, int, std::size_t>> events;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PoolRequest& r = requests[i];
    out.size_bytes = std::max(out.size_bytes, r.bytes);
    if (!occupies(r)) continue;
    events.emplace_back(r.begin, 1, i);
    events.emplace_back(r.end, 0, i);
  }
  std::sort(events.begin(), events.end());
  std::map<int64_t, int64_t> free_at;             // offset -> bytes of each free block
  std::set<std::pair<int64_t, int64_t>> by_size;  // (bytes, offset) of the same blocks
  int64_t frontier = 0;                           // everything above is free
  auto add_free = [&](int64_t offset, int64_t bytes) {
    if (bytes <= 0) return;
    auto next = free_at.lower_bound(offset);
    if (next != free_at.end() && next->first == offset + bytes) {  // merge the block above
      bytes += next->second;
      by_size.erase({next->second, next->first});
      next = free_at.erase(next);
    }
    if (next != free_at.begin()) {  // and the one below
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        by_size.erase({prev->second, prev->first});
        free_at.erase(prev);
      }
    }
    if (offset + bytes == frontier) {
      frontier = offset;
      return;
    }
    free_at.emplace(offset, bytes);
    by_size.emplace(bytes, offset);
  };
  auto take = [&](int64_t block, int64_t block_bytes, int64_t at, int64_t bytes) {
    by_size.erase({block_bytes, block});
    free_at.erase(block);
    add_free(block, at - block);
    add_free(at + bytes, block + block_bytes - at - bytes);
  };
  for (const auto& [time, allocate, i] : events) {
    const PoolRequest& r = requests[i];
    if (!allocate) {
      add_free(out.offsets[i], r.bytes);
      continue;
    }
    const int64_t alignment = alignment_of(r, default_alignment);
    bool placed = false;
    // The smallest blocks that hold the bytes; alignment may waste a few, so a handful
    // are tried before the top.
    int tries = 0;
    for (auto it = by_size.lower_bound({r.bytes, INT64_MIN}); it != by_size.end() && tries < 8;
         ++it, ++tries) {
      const auto [block_bytes, block] = *it;
      const int64_t at = round_up(block, alignment);
      if (at - block <= block_bytes - r.bytes) {
        take(block, block_bytes, at, r.bytes);
        out.offsets[i] = at;
        placed = true;
        break;
      }
    }
    if (!placed) {
      // On top, starting inside the free block that reaches the frontier, if any.
      int64_t start = frontier;
      if (!free_at.empty()) {
        auto last = std::prev(free_at.end());
        if (last->first + last->second == frontier) {
          start = last->first;
          by_size.erase({last->second, last->first});
          free_at.erase(last);
        }
      }
      const int64_t at = round_up(start, alignment);
      frontier = at + r.bytes;
      if (at > start) {
        free_at.emplace(start, at - start);
        by_size.emplace(at - start, start);
      }
      out.offsets[i] = at;
    }
    out.size_bytes = std::max(out.size_bytes, out.offsets[i] + r.bytes);
  }
  return out;
}

}  // namespace shardplan::pool
