#include "simulator/simulate.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "planner/memory_replay.h"
#include "simulator/compute_model.h"

namespace shardplan {
namespace {

// Edges in a vector, not Boost's default list: a step has tens of thousands of them and
// each list node was an allocation (the sweep simulates hundreds of steps).
using Graph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property,
                          boost::no_property, boost::no_property, boost::vecS>;

// Edges: every dependency, and each op's predecessor on its stream.
Graph op_graph(const Plan& plan) {
  Graph g(plan.ops.size());
  std::vector<int64_t> last_on_stream(kNumStreams, -1);
  for (const PlanOp& op : plan.ops) {
    const auto v = static_cast<std::size_t>(op.id);
    for (int64_t d : op.deps) boost::add_edge(static_cast<std::size_t>(d), v, g);
    int64_t& last = last_on_stream[static_cast<std::size_t>(op.stream)];
    if (last >= 0 && std::find(op.deps.begin(), op.deps.end(), last) == op.deps.end())
      boost::add_edge(static_cast<std::size_t>(last), v, g);
    last = op.id;
  }
  return g;
}

struct Running {
  int64_t op;
  double latency_left;  // collectives: seconds of latency still to run (rate 1)
  double work_left;     // seconds of work at rate 1
  double min_end;       // not before the host has issued its last kernel
};

// By kind, not stream: blocking tensor- and context-parallel collectives run on the
// compute stream, and share their links with whatever else is moving.
bool is_collective(const PlanOp& op) {
  return shardplan::is_collective(op.kind);
}

// The host's side (docs/model.md "Host time"): one CPU thread issues the ops in plan
// order, op.host_seconds each (scaled to the cluster's CPU); an op starts no earlier than
// the host begins issuing it and ends no earlier than the host has issued all of it. At a
// host_sync the host first waits for the compute stream's previous op to end.
class Host {
 public:
  Host(const Plan& plan, const ClusterSpec& cluster)
      : plan_(plan),
        scale_(cluster.host_cpu.time_scale),
        issue_(plan.ops.size(), 0),
        issued_(plan.ops.size(), 0),
        sync_target_(plan.ops.size(), -1) {
    int64_t last_compute = -1;
    for (const PlanOp& op : plan.ops) {
      if (op.host_sync) sync_target_[static_cast<std::size_t>(op.id)] = last_compute;
      if (op.stream == Stream::compute) last_compute = op.id;
    }
  }
  // Issues every op it can; `ended` says which ops have ended, `end` when.
  void advance(const std::vector<char>& ended, const std::vector<double>& end) {
    while (next_ < plan_.ops.size()) {
      const int64_t target = sync_target_[next_];
      if (target >= 0) {
        const auto t = static_cast<std::size_t>(target);
        if (!ended[t]) return;
        clock_ = std::max(clock_, end[t]);
      }
      issue_[next_] = clock_;
      clock_ += plan_.ops[next_].host_seconds * scale_;
      issued_[next_] = clock_;
      ++next_;
    }
  }
  bool reached(std::size_t op) const { return op < next_; }
  double issue(std::size_t op) const { return issue_[op]; }
  double issued(std::size_t op) const { return issued_[op]; }

 private:
  const Plan& plan_;
  const double scale_;
  std::vector<double> issue_, issued_;
  std::vector<int64_t> sync_target_;
  std::size_t next_ = 0;
  double clock_ = 0;
};

// Runs the event loop; fills start and end per op, and per op the time it ran on after its
// work, waiting for the host to issue the rest of it (`stretch`). Returns the time the
// compute stream's ops waited for the host: started after their inputs were ready, or
// ended after their work.
double run_events(const Plan& plan, const ClusterSpec& cluster, const Graph& g,
                  std::vector<double>& start, std::vector<double>& end,
                  std::vector<double>& stretch) {
  const auto n = plan.ops.size();
  std::vector<OpCost> cost(n);
  GemmRateCache gemm_rates;
  for (std::size_t i = 0; i < n; ++i) cost[i] = op_cost(plan, plan.ops[i], cluster, &gemm_rates);
  std::vector<std::size_t> waiting(n);
  std::vector<int64_t> ready;  // inputs ready, kept sorted descending (lowest id at the back)
  std::vector<double> ready_at(n, 0), work_done_at(n, -1);  // -1: work still to do
  std::vector<char> ended(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = boost::in_degree(i, g);
    if (waiting[i] == 0) ready.push_back(static_cast<int64_t>(i));
  }
  std::sort(ready.rbegin(), ready.rend());
  Host host(plan, cluster);
  host.advance(ended, end);
  std::vector<Running> running;
  std::vector<int64_t> finished;  // per event, kept to reuse their storage
  std::vector<int64_t> held;      // ready but not yet issued by the host
  std::vector<double> rates;
  double now = 0;
  double host_wait = 0;
  std::size_t done = 0;
  const double slowdown = 1.0 + cluster.compute.overlap_slowdown;
  while (done < n) {
    // Start everything ready that the host has issued, lowest id first (each stream has at
    // most one: the stream predecessor edge keeps a stream's ops in order).
    const double tolerance = 1e-12 * std::max(now, 1e-9);
    held.clear();
    double next_issue = std::numeric_limits<double>::infinity();
    while (!ready.empty()) {
      const int64_t id = ready.back();
      ready.pop_back();
      const auto i = static_cast<std::size_t>(id);
      if (!host.reached(i) || host.issue(i) > now + tolerance) {
        if (host.reached(i)) next_issue = std::min(next_issue, host.issue(i));
        held.push_back(id);
        continue;
      }
      const OpCost& c = cost[i];
      start[i] = now;
      if (plan.ops[i].stream == Stream::compute) host_wait += now - ready_at[i];
      running.push_back({id, c.latency_seconds, c.seconds - c.latency_seconds, host.issued(i)});
      if (running.back().latency_left <= 0 && running.back().work_left <= 0) work_done_at[i] = now;
    }
    ready.assign(held.rbegin(), held.rend());
    if (running.empty() && !std::isfinite(next_issue))
      throw std::logic_error("simulate: the op graph has a cycle");
    // Rates: compute slows while any collective moves data; transfers share their tier.
    bool collective_running = false;
    int64_t sharing[3] = {0, 0, 0};
    for (const Running& r : running) {
      const PlanOp& op = plan.ops[static_cast<std::size_t>(r.op)];
      if (!is_collective(op) || (r.latency_left <= 0 && r.work_left <= 0)) continue;
      collective_running = true;
      if (r.latency_left <= 0)
        ++sharing[static_cast<int>(cost[static_cast<std::size_t>(r.op)].tier)];
    }
    auto rate = [&](const Running& r) {
      const PlanOp& op = plan.ops[static_cast<std::size_t>(r.op)];
      // Host copies run on their own link and copy engines, whatever else runs.
      if (op.kind == OpKind::offload || op.kind == OpKind::reload) return 1.0;
      if (!is_collective(op)) return collective_running ? 1.0 / slowdown : 1.0;
      if (r.latency_left > 0) return 1.0;
      const int64_t k = sharing[static_cast<int>(cost[static_cast<std::size_t>(r.op)].tier)];
      return 1.0 / static_cast<double>(std::max<int64_t>(k, 1));
    };
    double step = next_issue - now;
    for (const Running& r : running) {
      const double left = r.latency_left > 0 ? r.latency_left / rate(r)
                          : r.work_left > 0  ? r.work_left / rate(r)
                                             : r.min_end - now;  // waiting for the host
      step = std::min(step, left);
    }
    step = std::max(step, 0.0);
    now += step;
    finished.clear();
    rates.clear();
    for (const Running& r : running) rates.push_back(rate(r));
    // A phase within a relative 1e-12 of its end counts as ended (rounding).
    const double after = 1e-12 * std::max(now, 1e-9);
    for (std::size_t k = 0; k < running.size(); ++k) {
      Running& r = running[k];
      if (r.latency_left > 0) {
        r.latency_left -= step * rates[k];
        if (r.latency_left <= after) r.latency_left = 0;
      } else if (r.work_left > 0) {
        r.work_left -= step * rates[k];
        if (r.work_left <= after) {
          r.work_left = 0;
          work_done_at[static_cast<std::size_t>(r.op)] = now;
        }
      }
      // An op whose latency just ended with no transfer left is finished too.
      if (r.latency_left == 0 && r.work_left <= 0 && now >= r.min_end - after)
        finished.push_back(r.op);
    }
    std::sort(finished.begin(), finished.end());
    for (int64_t id : finished) {
      const auto i = static_cast<std::size_t>(id);
      end[i] = now;
      ended[i] = 1;
      if (work_done_at[i] >= 0) stretch[i] = now - work_done_at[i];
      if (plan.ops[i].stream == Stream::compute) host_wait += stretch[i];
      ++done;
      std::erase_if(running, [&](const Running& r) { return r.op == id; });
      for (auto [e, last] = boost::out_edges(i, g); e != last; ++e) {
        const std::size_t next = boost::target(*e, g);
        if (--waiting[next] == 0) {
          ready.push_back(static_cast<int64_t>(next));
          ready_at[next] = now;
        }
      }
    }
    if (!finished.empty()) host.advance(ended, end);
    std::sort(ready.rbegin(), ready.rend());
  }
  return host_wait;
}

// Back from the op that ends last, through the predecessor that ended last (the one the
// op waited for); ties go to the higher id, the later op in program order.
std::vector<int64_t> critical_path(const Graph& g, const std::vector<double>& end) {
  std::vector<int64_t> path;
  if (end.empty()) return path;
  auto v = static_cast<std::size_t>(std::max_element(end.begin(), end.end()) - end.begin());
  while (true) {
    path.push_back(static_cast<int64_t>(v));
    bool any = false;
    std::size_t best = 0;
    for (auto [e, last] = boost::in_edges(v, g); e != last; ++e) {
      const std::size_t u = boost::source(*e, g);
      if (!any || end[u] > end[best] || (end[u] == end[best] && u > best)) best = u;
      any = true;
    }
    if (!any) break;
    v = best;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

// The plan's memory replay (planner/memory_replay.h), the figures `plan` reports, laid
// on the simulated times: the host issues op i no earlier than the ops before it, so its
// frees and allocations are drawn at the latest start so far. Samples at one time keep
// the most (the peak of that instant).
void simulate_memory(const Plan& plan, Timeline& t) {
  const MemoryReplay replay = replay_memory(plan);
  auto sample = [&](double time, const MemoryReplay::Point& p) {
    if (!t.memory.empty() && t.memory.back().time == time) {
      MemorySample& last = t.memory.back();
      last.allocated = std::max(last.allocated, p.allocated);
      last.reserved = std::max(last.reserved, p.reserved);
    } else {
      t.memory.push_back({.time = time, .allocated = p.allocated, .reserved = p.reserved});
    }
  };
  double issued = 0;
  sample(0, replay.points.front());
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    issued = std::max(issued, t.ops[i].start);
    sample(issued, replay.points[i + 1]);
  }
  sample(std::max(issued, t.summary.step_seconds), replay.points.back());
  t.summary.peak_allocated_bytes = replay.peak_allocated;
  t.summary.peak_reserved_bytes = replay.peak_reserved;
  t.summary.fits = replay.fits;
}

}  // namespace

std::vector<BufferLifetime> buffer_lifetimes(const Plan& plan, const Timeline& timeline) {
  const std::vector<int64_t> waiter = earliest_compute_waiters(plan);
  const auto n = plan.ops.size();
  if (timeline.ops.size() != n)
    throw std::logic_error("buffer_lifetimes: timeline of another plan");
  const double step = timeline.summary.step_seconds;
  std::vector<BufferLifetime> spans(plan.buffers.size());
  for (const PlanBuffer& b : plan.buffers) {
    if (b.persistent) spans[static_cast<std::size_t>(b.id)] = {0, step, true};
  }
  for (const PlanOp& op : plan.ops) {
    const TimelineOp& timed = timeline.ops[static_cast<std::size_t>(op.id)];
    double released = timed.end;
    if (op.stream != Stream::compute &&
        waiter[static_cast<std::size_t>(op.id)] < static_cast<int64_t>(n))
      released = std::max(
          released,
          timeline.ops[static_cast<std::size_t>(waiter[static_cast<std::size_t>(op.id)])].start);
    for (const auto* list : {&op.reads, &op.writes}) {
      for (int64_t id : *list) {
        BufferLifetime& s = spans[static_cast<std::size_t>(id)];
        if (plan.buffers[static_cast<std::size_t>(id)].persistent) continue;
        s.alloc = s.used ? std::min(s.alloc, timed.start) : timed.start;
        s.free = s.used ? std::max(s.free, released) : released;
        s.used = true;
      }
    }
  }
  return spans;
}

double model_flops_utilization(const Plan& plan, double step_seconds, const ClusterSpec& cluster) {
  return step_seconds > 0 ? plan.model_flops / (step_seconds * cluster.gpu.bf16_dense_flops) : 0;
}

Timeline simulate(const Plan& plan, const ClusterSpec& cluster) {
  const auto n = plan.ops.size();
  const Graph g = op_graph(plan);
  std::vector<double> start(n, 0), end(n, 0), stretch(n, 0);
  const double host_wait = run_events(plan, cluster, g, start, end, stretch);

  Timeline t = plan_timeline(plan, "predicted", std::string(allocator_name(plan.config.allocator)),
                             start, end);
  TimelineSummary& s = t.summary;
  s.step_seconds = n == 0 ? 0 : *std::max_element(end.begin(), end.end());

  summarize_streams(t);
  if (s.step_seconds > 0)
    s.tokens_per_second_per_gpu = static_cast<double>(plan.tokens_per_gpu) / s.step_seconds;
  s.mfu = model_flops_utilization(plan, s.step_seconds, cluster);
  s.host_wait_seconds = host_wait;

  t.critical_path = critical_path(g, end);
  double path_end = 0;  // where the path's previous op ended
  for (int64_t id : t.critical_path) {
    const PlanOp& op = plan.ops[static_cast<std::size_t>(id)];
    const auto i = static_cast<std::size_t>(id);
    // The host's part of the path: an op that started after the one it waited for had
    // ended, or ran on after its work, waited for the host.
    const double d = end[i] - start[i] - stretch[i];
    PathBreakdown& p = s.critical_path;
    p.host += std::max(start[i] - path_end, 0.0) + stretch[i];
    path_end = end[static_cast<std::size_t>(id)];
    switch (op.stream) {
      case Stream::tp:
      case Stream::cp:
        p.model_parallel += d;
        break;
      case Stream::compute:
        // Blocking collectives run here too: tensor- and context-parallel ones, and FSDP's
        // reductions without async_reduce.
        if (is_collective(op)) {
          (is_model_parallel_group(plan, op.group) ? p.model_parallel : p.reduce_scatter) += d;
        } else {
          (op.kind == OpKind::optimizer_step ? p.optimizer : p.compute) += d;
        }
        break;
      case Stream::ag:
        p.all_gather += d;
        break;
      case Stream::rs:
        p.reduce_scatter += d;
        break;
      case Stream::outer:
        p.outer += d;
        break;
      case Stream::d2h:
      case Stream::h2d:
        p.offload += d;
        break;
    }
  }

  s.capacity_bytes = plan.capacity_bytes;
  simulate_memory(plan, t);
  return t;
}

}  // namespace shardplan
