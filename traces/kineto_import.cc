// Kineto (PyTorch profiler) Chrome traces -> ImportedTrace.
//
// The CPU side says what ran for which module; the GPU side says when. They are joined by
// the runtime call that launched each GPU activity (args.correlation):
//
//   CPU main thread   |ProfilerStep#5 ....................................................|
//                     |nn.Module: Block_0 |nn.Module: Block_1 |          |Optimizer.step|
//                       aten::mm -launch-.
//   CPU autograd thrd                       |evaluate_function: MmBackward0 (seq 12)|
//   GPU stream 7              [gemm]            [gemm bwd]
//
// A forward kernel belongs to the innermost traced module range around its launch; a
// backward kernel to the autograd op around its launch, whose Sequence number (or fwdbwd
// flow) names the forward op, whose module range names the module.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "models/error.h"
#include "traces/kineto_passes.h"
#include "traces/trace_import.h"

namespace shardplan {
namespace {

using kineto::end_of;
using kineto::is_gpu_activity;
using kineto::kEvaluateFunction;
using kineto::lower;
using kineto::starts_with;

bool is_kernel(const KinetoEvent& e) {
  return e.cat == "kernel" || e.cat == "Kernel";
}

bool is_communication_kernel(const KinetoEvent& e) {
  const std::string n = lower(e.name);
  return n.find("nccl") != std::string::npos || n.find("rccl") != std::string::npos;
}

// c10d / record_param_comms names -> the plan's collective names.
std::string collective_kind(std::string_view name) {
  const std::string n = lower(name);
  auto has = [&](std::string_view s) { return n.find(s) != std::string::npos; };
  if (has("reduce_scatter") || has("reducescatter")) return "reduce_scatter";
  if (has("allgather") || has("all_gather")) return "all_gather";
  if (has("allreduce") || has("all_reduce")) return "all_reduce";
  if (has("broadcast")) return "broadcast";
  if (has("alltoall") || has("all_to_all")) return "all_to_all";
  if (has("sendrecv") || has("send") || has("recv")) return "send_recv";
  if (has("reduce")) return "reduce";
  if (has("barrier")) return "barrier";
  return "";
}

// Bytes per element of the dtype names PyTorch writes ("BFloat16", "Float", ...).
int64_t dtype_size(std::string_view dtype) {
  const std::string d = lower(dtype);
  if (d == "double" || d == "long" || d == "int64" || d == "float64") return 8;
  if (d == "float" || d == "int" || d == "float32" || d == "int32") return 4;
  if (d == "bfloat16" || d == "half" || d == "float16" || d == "short" || d == "bf16") return 2;
  if (d == "byte" || d == "char" || d == "bool" || starts_with(d, "float8") || d == "uint8")
    return 1;
  return 0;
}

std::string short_kernel_name(std::string_view name) {
  std::string n(starts_with(name, "void ") ? name.substr(5) : name);
  const std::size_t cut = n.find_first_of("(<");
  if (cut != std::string::npos && cut > 0) n = n.substr(0, cut);
  if (n.size() > 80) n = n.substr(0, 80);
  return n;
}

// "FSDP::pre_forward (layers.3)" -> {"pre_forward", "layers.3"}; the root unit has no name.
std::optional<std::pair<std::string, std::string>> fsdp_range(std::string_view name) {
  if (!starts_with(name, "FSDP::")) return std::nullopt;
  std::string_view rest = name.substr(6);
  std::string fqn;
  if (const std::size_t open = rest.find(" ("); open != std::string_view::npos &&
                                                 !rest.empty() && rest.back() == ')') {
    fqn = std::string(rest.substr(open + 2, rest.size() - open - 3));
    rest = rest.substr(0, open);
  }
  return std::pair{std::string(rest), fqn};
}

struct ModuleCall {
  int64_t module = -1;
  int64_t micro_batch = 0;
  double begin = 0, end = 0;
};

// Sorts calls by time and numbers their micro-batches: a pass begins with each call of
// module 0, the first traced module.
void number_passes(std::vector<ModuleCall>& calls) {
  std::sort(calls.begin(), calls.end(),
            [](const ModuleCall& a, const ModuleCall& b) { return a.begin < b.begin; });
  int64_t pass = -1;
  for (ModuleCall& c : calls) {
    if (c.module == 0) ++pass;
    c.micro_batch = std::max<int64_t>(pass, 0);
  }
}

// A module range on one thread, with the ranges nested in it.
struct RangeNode {
  std::string name;
  double begin = 0, end = 0;
  std::vector<std::size_t> children;
};

class KinetoAnalysis {
 public:
  KinetoAnalysis(const std::string& path, KinetoTrace trace, const ImportOptions& options)
      : trace_(std::move(trace)), options_(options) {
    out_.file = path;
    out_.format = "kineto";
  }

  ImportedTrace run() {
    if (trace_.events_without_time > 0) {
      warn(fmt::format("{} events without a time stamp ('ts') were left out",
                       trace_.events_without_time));
    }
    kineto::StepChoice choice = kineto::choose_step(events(), options_.step, out_.file);
    out_.steps = std::move(choice.steps);
    for (std::string& w : choice.warnings) warn(std::move(w));
    step_ = std::move(choice.step);
    out_.step = step_.name;
    cpu_ = kineto::index_cpu_events(events(), step_);
    const bool fsdp = find_fsdp_units();
    if (!fsdp) find_module_ranges();
    number_micro_batches();
    attribute_backward();
    if (fsdp) find_recompute_in_backward_windows();
    number_recompute_micro_batches();
    index_recompute();
    build_events();
    import_gpu_activity();
    import_memory();
    return std::move(out_);
  }

 private:
  const std::vector<KinetoEvent>& events() const { return trace_.events; }
  bool in_step(double t) const { return step_.contains(t); }
  void warn(std::string text) { out_.warnings.push_back(std::move(text)); }

  int64_t module_index(const std::string& name) {
    const auto [it, inserted] = module_ids_.try_emplace(name, out_.trace.modules.size());
    if (inserted) out_.trace.modules.push_back(name);
    return static_cast<int64_t>(it->second);
  }

  // FSDP2's record_function ranges name each unit (torch/distributed/fsdp/_fully_shard/
  // _fsdp_param_group.py, _with_fqn: "FSDP::pre_forward (layers.3)"; the root has no FQN).
  // A forward window runs from FSDP::pre_forward to the end of FSDP::post_forward. A
  // backward window opens at FSDP::pre_backward and closes at the last post-backward
  // range of the unit before its next pre_backward: FSDP2 records
  // post_backward_accumulate, post_backward_reshard and post_backward_reduce (the last
  // is absent without gradient sync); "FSDP::post_backward" itself is only a debug log.
  bool find_fsdp_units() {
    struct Range {
      std::string what, fqn;
      double begin, end;
      int64_t tid;
    };
    std::vector<Range> ranges;
    for (const KinetoEvent& e : events()) {
      if (e.ph != 'X' || !in_step(e.ts) || !starts_with(e.name, "FSDP::")) continue;
      if (auto r = fsdp_range(e.name)) ranges.push_back({r->first, r->second, e.ts, end_of(e), e.tid});
    }
    std::stable_sort(ranges.begin(), ranges.end(),
                     [](const Range& a, const Range& b) { return a.begin < b.begin; });
    const bool any = std::any_of(ranges.begin(), ranges.end(), [](const Range& r) {
      return r.what == "pre_forward" || r.what == "pre_backward";
    });
    if (!any) return false;
    out_.module_source = "FSDP2 record_function ranges (FSDP::pre_forward/post_forward, "
                         "FSDP::pre_backward/post_backward_*)";
    bool any_fqn = false;
    std::map<std::string, std::vector<Range>> open_forward;  // per unit, first in first out
    std::map<std::string, std::vector<Range>> pre_backward, post_backward;
    for (const Range& r : ranges) {
      if (r.what == "pre_forward") {
        any_fqn = any_fqn || !r.fqn.empty();
        // Units are numbered in forward order, the root (no FQN in FSDP2) first.
        if (r.tid == step_.tid) module_index(r.fqn);
        open_forward[r.fqn].push_back(r);
      } else if (r.what == "post_forward") {
        auto& pending = open_forward[r.fqn];
        if (pending.empty()) continue;
        const Range pre = pending.front();
        pending.erase(pending.begin());
        const int64_t m = module_index(r.fqn);
        if (pre.tid == step_.tid) {
          forward_calls_.push_back({m, 0, pre.begin, r.end});
        } else {  // a unit's forward re-run inside backward: activation checkpointing
          recompute_calls_.push_back({m, 0, pre.begin, r.end});
          recompute_thread_.push_back(pre.tid);
        }
      } else if (r.what == "pre_backward") {
        pre_backward[r.fqn].push_back(r);
      } else if (starts_with(r.what, "post_backward")) {
        post_backward[r.fqn].push_back(r);
      } else if (r.what == "root_post_backward_callback" || r.what == "root_post_backward") {
        final_callbacks_.push_back(r.begin);
      }
    }
    int64_t unclosed = 0;
    for (const auto& [fqn, opens] : pre_backward) {
      const int64_t m = module_index(fqn);
      const std::vector<Range>& closers = post_backward[fqn];
      for (std::size_t i = 0; i < opens.size(); ++i) {
        const double next = i + 1 < opens.size() ? opens[i + 1].begin : 1e300;
        double end = -1;
        for (const Range& c : closers)
          if (c.begin >= opens[i].begin && c.begin < next) end = std::max(end, c.end);
        if (end < 0) {
          ++unclosed;
          end = opens[i].end;
        }
        fsdp_backward_.push_back({m, 0, opens[i].begin, end});
      }
    }
    if (unclosed > 0) {
      warn(fmt::format("{} FSDP::pre_backward range(s) have no post-backward range after them: "
                       "their backward windows end with pre_backward",
                       unclosed));
    }
    // Each backward pass opens with the root unit's pre_backward (its hook sits on the
    // model's outputs).
    number_passes(fsdp_backward_);
    if (!any_fqn && forward_calls_.size() > 1) {
      warn("FSDP ranges carry no module names (older PyTorch writes bare 'FSDP::pre_forward'): "
           "every unit reads as the root unit \"\"");
    }
    return true;
  }

  // Module ranges on the autograd thread inside a unit's backward window are that unit's
  // forward re-run (activation checkpointing around an FSDP unit runs no FSDP hooks).
  void find_recompute_in_backward_windows() {
    if (!recompute_calls_.empty()) return;
    for (auto& [tid, nodes] : module_ranges()) {
      if (tid == step_.tid) continue;
      for (std::size_t i : nest(nodes)) {
        const auto call = backward_index_.innermost(nodes[i].begin);
        if (!call) continue;
        const int64_t m = backward_calls_[static_cast<std::size_t>(*call)].module;
        recompute_calls_.push_back({m, 0, nodes[i].begin, nodes[i].end});
        recompute_thread_.push_back(tid);
      }
    }
  }

  // Forward calls in time order, numbered by micro-batch: a pass starts with each call of
  // the first traced module (the root unit under FSDP2, the first module otherwise), so a
  // module called twice in one pass (a shared layer) stays in its pass.
  void number_micro_batches() {
    number_passes(forward_calls_);
    for (std::size_t c = 0; c < forward_calls_.size(); ++c)
      forward_index_.add(forward_calls_[c].begin, forward_calls_[c].end, static_cast<int64_t>(c));
    forward_index_.finish();
  }

  // A recompute belongs to the micro-batch whose backward of that module holds it, else to
  // that of the last backward window that opened before it. Ranges of one module in one
  // micro-batch on one thread are one checkpointed region re-run (its sibling modules).
  void number_recompute_micro_batches() {
    for (ModuleCall& r : recompute_calls_) {
      const ModuleCall* best = nullptr;
      for (const ModuleCall& b : backward_calls_) {
        if (b.module == r.module && b.begin <= r.begin && r.begin <= b.end) {
          best = &b;
          break;
        }
        if (b.begin <= r.begin && (best == nullptr || b.begin > best->begin)) best = &b;
      }
      r.micro_batch = best != nullptr ? best->micro_batch : 0;
    }
    std::vector<ModuleCall> merged;
    std::vector<int64_t> threads;
    for (std::size_t i = 0; i < recompute_calls_.size(); ++i) {
      const ModuleCall& r = recompute_calls_[i];
      if (!merged.empty() && merged.back().module == r.module &&
          merged.back().micro_batch == r.micro_batch && threads.back() == recompute_thread_[i]) {
        merged.back().end = std::max(merged.back().end, r.end);
        continue;
      }
      merged.push_back(r);
      threads.push_back(recompute_thread_[i]);
    }
    recompute_calls_ = std::move(merged);
    recompute_thread_ = std::move(threads);
  }

  // The step's "nn.Module: Class_k" ranges (profiles taken with with_stack=True) by
  // thread, named Class_k. The reader keeps no other Python ranges.
  std::map<int64_t, std::vector<RangeNode>> module_ranges() const {
    constexpr std::string_view kPrefix = "nn.Module: ";
    std::map<int64_t, std::vector<RangeNode>> by_thread;
    for (const KinetoEvent& e : events()) {
      if (e.ph == 'X' && e.cat == "python_function" && in_step(e.ts))
        by_thread[e.tid].push_back({std::string(e.name.substr(kPrefix.size())), e.ts, end_of(e), {}});
    }
    return by_thread;
  }

  // Module order from the nn.Module ranges on the step's thread; ranges on other threads
  // are recomputes.
  void find_module_ranges() {
    std::map<int64_t, std::vector<RangeNode>> by_thread = module_ranges();
    if (by_thread.empty()) {
      warn("no module ranges (nn.Module ranges need the profiler's with_stack=True; FSDP2 "
           "writes FSDP:: ranges): the module order is unknown, GPU time is split by phase only");
      out_.module_source = "none";
      return;
    }
    out_.module_source = "nn.Module ranges (with_stack)";
    std::map<int64_t, std::vector<std::size_t>> roots;
    for (auto& [tid, nodes] : by_thread) roots[tid] = nest(nodes);
    if (const auto main = by_thread.find(step_.tid); main != by_thread.end())
      trace_modules(main->second, roots[step_.tid]);
    find_recompute(by_thread, roots);
  }

  // Nests ranges by containment; returns the top-level ones in time order.
  static std::vector<std::size_t> nest(std::vector<RangeNode>& nodes) {
    std::sort(nodes.begin(), nodes.end(), [](const RangeNode& a, const RangeNode& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<std::size_t> roots, stack;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      while (!stack.empty() && nodes[stack.back()].end < nodes[i].end) stack.pop_back();
      (stack.empty() ? roots : nodes[stack.back()].children).push_back(i);
      stack.push_back(i);
    }
    return roots;
  }

  // The traced level: below wrappers that hold one module (DistributedDataParallel ->
  // ResNet), to where the model branches, then `depth` levels further.
  void trace_modules(const std::vector<RangeNode>& nodes, const std::vector<std::size_t>& roots) {
    std::vector<std::size_t> level = roots;
    auto one_name = [&](const std::vector<std::size_t>& l) {
      for (std::size_t i : l) {
        if (nodes[i].name != nodes[l.front()].name || nodes[i].children.empty()) return false;
      }
      return !l.empty();
    };
    auto descend = [&](const std::vector<std::size_t>& l, bool all) {
      std::vector<std::size_t> next;
      for (std::size_t i : l) {
        if (nodes[i].children.empty() && !all) {
          next.push_back(i);
        } else {
          next.insert(next.end(), nodes[i].children.begin(), nodes[i].children.end());
        }
      }
      return next;
    };
    while (one_name(level)) level = descend(level, true);
    for (int64_t d = 0; d < options_.depth; ++d) level = descend(level, false);

    for (std::size_t i : level) {
      const int64_t m = module_index(nodes[i].name);
      forward_calls_.push_back({m, 0, nodes[i].begin, nodes[i].end});
      mark_subtree(nodes, i, m);
    }
  }

  void mark_subtree(const std::vector<RangeNode>& nodes, std::size_t i, int64_t module) {
    traced_of_name_.emplace(nodes[i].name, module);
    for (std::size_t c : nodes[i].children) mark_subtree(nodes, c, module);
  }

  // Module ranges on other threads inside the step are forwards re-run in backward
  // (activation checkpointing); the outermost range that names a traced module's subtree
  // is that module's recompute.
  void find_recompute(const std::map<int64_t, std::vector<RangeNode>>& by_thread,
                      const std::map<int64_t, std::vector<std::size_t>>& roots_by_thread) {
    for (const auto& [tid, roots] : roots_by_thread) {
      if (tid == step_.tid) continue;
      const std::vector<RangeNode>& nodes = by_thread.at(tid);
      std::vector<std::size_t> todo(roots.rbegin(), roots.rend());
      while (!todo.empty()) {
        const std::size_t i = todo.back();
        todo.pop_back();
        const auto it = traced_of_name_.find(nodes[i].name);
        if (it == traced_of_name_.end()) {
          todo.insert(todo.end(), nodes[i].children.rbegin(), nodes[i].children.rend());
          continue;
        }
        const int64_t m = it->second;
        recompute_calls_.push_back({m, 0, nodes[i].begin, nodes[i].end});
        recompute_thread_.push_back(tid);
      }
    }
  }

  void index_recompute() {
    for (std::size_t c = 0; c < recompute_calls_.size(); ++c) {
      recompute_index_.add(recompute_thread_[c], recompute_calls_[c].begin,
                           recompute_calls_[c].end, static_cast<int64_t>(c));
    }
    recompute_index_.finish();
  }

  // The traced forward call an op at time t on the step's thread belongs to.
  std::optional<ModuleCall> forward_call_at(double t) const {
    const auto c = forward_index_.innermost(t);
    if (!c) return std::nullopt;
    return forward_calls_[static_cast<std::size_t>(*c)];
  }

  // The forward call whose op an autograd backward op differentiates.
  std::optional<ModuleCall> call_of_backward_op(int64_t op) const {
    int64_t fwd = -1;
    if (const auto f = cpu_.forward_of_backward.find(op); f != cpu_.forward_of_backward.end()) {
      fwd = f->second;
    } else if (const int64_t seq = events()[static_cast<std::size_t>(op)].sequence; seq >= 0) {
      if (const auto s = cpu_.forward_op_by_sequence.find(seq); s != cpu_.forward_op_by_sequence.end())
        fwd = s->second;
    }
    if (fwd < 0) return std::nullopt;
    return forward_call_at(events()[static_cast<std::size_t>(fwd)].ts);
  }

  // Backward windows: from FSDP ranges, or spanned by each call's autograd ops.
  void attribute_backward() {
    if (!fsdp_backward_.empty()) {
      backward_calls_ = fsdp_backward_;
    } else {
      std::map<std::pair<int64_t, int64_t>, ModuleCall> spans;  // (module, mb)
      for (std::size_t i = 0; i < events().size(); ++i) {
        const KinetoEvent& e = events()[i];
        if (e.ph != 'X' || !in_step(e.ts) || !starts_with(e.name, kEvaluateFunction)) continue;
        const auto call = call_of_backward_op(static_cast<int64_t>(i));
        if (!call) continue;
        auto [it, inserted] = spans.try_emplace(
            {call->module, call->micro_batch},
            ModuleCall{call->module, call->micro_batch, e.ts, end_of(e)});
        if (!inserted) {
          it->second.begin = std::min(it->second.begin, e.ts);
          it->second.end = std::max(it->second.end, end_of(e));
        }
      }
      for (const auto& [key, call] : spans) backward_calls_.push_back(call);
      if (cpu_.backward_threads.empty() && !forward_calls_.empty()) {
        warn("no autograd evaluate_function ops in the step: backward not attributed to modules");
      }
    }
    for (std::size_t c = 0; c < backward_calls_.size(); ++c)
      backward_index_.add(backward_calls_[c].begin, backward_calls_[c].end, static_cast<int64_t>(c));
    backward_index_.finish();
  }

  void build_events() {
    StepTrace& t = out_.trace;
    t.checkpointed.assign(t.modules.size(), false);
    for (const ModuleCall& c : recompute_calls_) t.checkpointed[static_cast<std::size_t>(c.module)] = true;
    t.recompute = recompute_calls_.empty() ? Recompute::none : Recompute::full;
    int64_t micro_batches = 0;
    for (const ModuleCall& c : forward_calls_) micro_batches = std::max(micro_batches, c.micro_batch + 1);
    t.grad_accum = std::max<int64_t>(1, micro_batches);

    struct Timed {
      double time;
      int order;
      StepEvent event;
    };
    std::vector<Timed> timed;
    for (const ModuleCall& c : forward_calls_) {
      timed.push_back({c.begin, 0, {StepEventKind::pre_forward, c.micro_batch, c.module}});
      timed.push_back({c.end, 1, {StepEventKind::post_forward, c.micro_batch, c.module}});
    }
    std::map<int64_t, double> backward_end;  // per micro-batch
    for (const ModuleCall& c : backward_calls_) {
      timed.push_back({c.begin, 0, {StepEventKind::pre_backward, c.micro_batch, c.module}});
      timed.push_back({c.end, 2, {StepEventKind::post_backward, c.micro_batch, c.module}});
      backward_end[c.micro_batch] = std::max(backward_end[c.micro_batch], c.end);
    }
    for (const ModuleCall& c : recompute_calls_)
      timed.push_back({c.begin, 1, {StepEventKind::recompute_forward, c.micro_batch, c.module}});
    if (!final_callbacks_.empty()) {
      int64_t mb = 0;
      for (double ts : final_callbacks_) timed.push_back({ts, 3, {StepEventKind::final_callback, mb++, -1}});
    } else {
      for (const auto& [mb, end] : backward_end)
        timed.push_back({end, 3, {StepEventKind::final_callback, mb, -1}});
    }
    if (cpu_.optimizer_begin)
      timed.push_back({*cpu_.optimizer_begin, 4, {StepEventKind::optimizer_step, -1, -1}});
    std::stable_sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
      return a.time != b.time ? a.time < b.time : a.order < b.order;
    });
    for (const Timed& x : timed) {
      t.events.push_back(x.event);
      cpu_event_times_.push_back(x.time);
    }
  }

  // What a GPU activity launched at (tid, t) was for: phase and traced module.
  std::pair<std::string, int64_t> attribute_launch(int64_t tid, double t) const {
    if (cpu_.optimizer.innermost(tid, t)) return {"optimizer_step", -1};
    if (const auto r = recompute_index_.innermost(tid, t))
      return {"recompute", recompute_calls_[static_cast<std::size_t>(*r)].module};
    if (tid == step_.tid) {
      if (const auto call = forward_call_at(t)) return {"forward", call->module};
    }
    if (const auto op = cpu_.backward_ops.innermost(tid, t)) {
      if (const auto call = call_of_backward_op(*op)) return {"backward", call->module};
      return {"backward", -1};
    }
    if (!fsdp_backward_.empty()) {
      if (const auto c = backward_index_.innermost(t))
        return {"backward", backward_calls_[static_cast<std::size_t>(*c)].module};
    }
    if (cpu_.backward_threads.count(tid) > 0) return {"backward", -1};
    if (const auto phase = cpu_.phases.innermost(tid, t)) return {*phase == 0 ? "forward" : "backward", -1};
    return {"other", -1};
  }

  // Collective metadata: the kernel's own args, else the comm op around its launch.
  ImportedCollective collective_of(const KinetoEvent& kernel, int64_t launch_tid, double launch_ts) const {
    ImportedCollective c;
    const KinetoEvent* meta = kernel.collective.empty() ? nullptr : &kernel;
    if (meta == nullptr && launch_tid != kNoThread) {
      if (const auto op = cpu_.comm_ops.innermost(launch_tid, launch_ts)) meta = &events()[static_cast<std::size_t>(*op)];
    }
    if (meta != nullptr) {
      c.kind = collective_kind(meta->collective.empty() ? meta->name : meta->collective);
      c.in_elements = meta->in_elements;
      c.out_elements = meta->out_elements;
      c.group_size = meta->group_size;
      c.dtype = std::string(meta->dtype);
    }
    if (c.kind.empty()) c.kind = collective_kind(kernel.name);
    if (c.kind.empty()) c.kind = "unknown";
    c.stream = kernel.stream >= 0 ? kernel.stream : kernel.tid;
    return c;
  }

  static std::string timeline_stream(const std::string& kind) {
    if (kind == "all_gather") return "ag";
    if (kind == "reduce_scatter" || kind == "all_reduce") return "rs";
    return "comm";
  }

  void import_gpu_activity() {
    Timeline& tl = out_.timeline;
    tl.source = "profiled";
    tl.allocator = "caching";
    // One GPU unless the trace says how many ranks ran (distributedInfo.world_size).
    tl.num_gpus = 1;
    if (const auto info = trace_.metadata.find("distributedInfo");
        info != trace_.metadata.end() && info->is_object()) {
      if (const auto w = info->find("world_size");
          w != info->end() && w->is_number_integer() && w->get<int64_t>() > 0)
        tl.num_gpus = w->get<int64_t>();
    }
    if (const auto props = trace_.metadata.find("deviceProperties");
        props != trace_.metadata.end() && props->is_array() && !props->empty() &&
        props->front().is_object()) {
      if (const auto name = props->front().find("name");
          name != props->front().end() && name->is_string())
        tl.cluster = name->get<std::string>();
    }
    out_.module_times.assign(out_.trace.modules.size(), ModuleTime{});

    struct Activity {
      const KinetoEvent* event;
      int64_t launch_tid;
      double launch_ts;
    };
    std::vector<Activity> activity;
    int64_t without_launch = 0;
    for (const KinetoEvent& e : events()) {
      if (!is_gpu_activity(e)) continue;
      const auto l = e.correlation >= 0 ? cpu_.launches.find(e.correlation) : cpu_.launches.end();
      if (l != cpu_.launches.end()) {
        const KinetoEvent& launch = events()[static_cast<std::size_t>(l->second)];
        if (in_step(launch.ts)) activity.push_back({&e, launch.tid, launch.ts});
      } else if (in_step(e.ts)) {
        ++without_launch;
        activity.push_back({&e, kNoThread, e.ts});
      }
    }
    if (activity.empty()) {
      throw InputError(out_.file, "traceEvents",
                       fmt::format("no GPU kernels, copies or sets in {} (was the profiler run "
                                   "with ProfilerActivity.CUDA?)", step_.name));
    }
    if (without_launch > 0) {
      warn(fmt::format("{} GPU activities have no launching runtime call (correlation): placed "
                       "by their own time and not attributed to modules", without_launch));
    }
    std::sort(activity.begin(), activity.end(), [](const Activity& a, const Activity& b) {
      return a.event->ts < b.event->ts;
    });
    origin_ = activity.front().event->ts;
    // Host time -> GPU time: the GPU start of the last activity launched by then (running
    // maximum over launch order), so a module boundary or an allocation lands where the
    // stream reaches it, as PyTorch's stream-ordered caching allocator sees it.
    for (const Activity& a : activity) {
      // Compute only: a queued collective starts when its peers are ready, not when the
      // stream the program waits on gets there.
      if (a.launch_tid != kNoThread && !is_communication_kernel(*a.event))
        host_to_gpu_.emplace_back(a.launch_ts, a.event->ts);
    }
    std::sort(host_to_gpu_.begin(), host_to_gpu_.end());
    for (std::size_t i = 1; i < host_to_gpu_.size(); ++i)
      host_to_gpu_[i].second = std::max(host_to_gpu_[i].second, host_to_gpu_[i - 1].second);
    double last = origin_;
    int64_t unsized = 0, unknown_dtype = 0;
    std::map<std::string, int64_t> unknown_kinds;
    double backward_seconds = 0, backward_unattributed = 0;
    for (const Activity& a : activity) {
      const KinetoEvent& e = *a.event;
      last = std::max(last, end_of(e));
      const auto [phase, module] = a.launch_tid == kNoThread ? std::pair<std::string, int64_t>{"other", -1}
                                                             : attribute_launch(a.launch_tid, a.launch_ts);
      const std::string module_name =
          module >= 0 ? out_.trace.modules[static_cast<std::size_t>(module)] : std::string();
      TimelineOp op{.op = static_cast<int64_t>(tl.ops.size()),
                    .start = (e.ts - origin_) * 1e-6,
                    .end = (end_of(e) - origin_) * 1e-6};
      if (is_kernel(e) && is_communication_kernel(e)) {
        ImportedCollective c = collective_of(e, a.launch_tid, a.launch_ts);
        c.start_seconds = op.start;
        c.duration_seconds = op.end - op.start;
        c.module = module_name;
        c.phase = phase;
        if (c.in_elements < 0 && c.out_elements < 0) {
          ++unsized;
        } else if (dtype_size(c.dtype) == 0) {
          ++unknown_dtype;
        }
        if (c.kind == "unknown") ++unknown_kinds[short_kernel_name(e.name)];
        const int64_t elements = std::max(c.in_elements, c.out_elements);
        op.bytes = elements > 0 ? static_cast<double>(elements * dtype_size(c.dtype)) : 0;
        op.kind = c.kind;
        op.stream = timeline_stream(c.kind);
        op.name = module_name.empty() ? c.kind : fmt::format("{} {}", c.kind, module_name);
        out_.collectives.push_back(std::move(c));
      } else {
        op.kind = phase;
        op.stream = "compute";
        op.name = module_name.empty() ? short_kernel_name(e.name)
                                      : fmt::format("{}: {}", module_name, short_kernel_name(e.name));
        if (phase == "backward") {
          backward_seconds += op.end - op.start;
          if (module < 0) backward_unattributed += op.end - op.start;
        }
        if (module >= 0) {
          ModuleTime& mt = out_.module_times[static_cast<std::size_t>(module)];
          const double d = op.end - op.start;
          (phase == "forward" ? mt.forward_seconds
           : phase == "backward" ? mt.backward_seconds
                                 : mt.recompute_seconds) += d;
          ++mt.kernels;
        }
      }
      tl.ops.push_back(std::move(op));
    }
    if (unsized > 0) {
      warn(fmt::format("{} of {} collectives carry no sizes (neither the NCCL kernel nor a "
                       "record_param_comms op around its launch has 'In msg nelems'): their "
                       "bytes are unknown, not guessed",
                       unsized, out_.collectives.size()));
    }
    if (unknown_dtype > 0) {
      warn(fmt::format("{} collectives have sizes but a dtype this importer does not know: "
                       "their bytes are left 0",
                       unknown_dtype));
    }
    if (backward_unattributed > 0.05 * backward_seconds && backward_seconds > 0) {
      warn(fmt::format("{:.1f} % of the backward GPU time belongs to no traced module "
                       "(gradient accumulation into .grad, DDP bucket copies, the loss, or ops "
                       "under a reentrant checkpoint)",
                       100.0 * backward_unattributed / backward_seconds));
    }
    for (const auto& [kernel, n] : unknown_kinds)
      warn(fmt::format("{} collective kernels '{}' of unknown kind", n, kernel));
    tl.summary.step_seconds = (last - origin_) * 1e-6;
    summarize_streams(tl);
    for (double t : cpu_event_times_) out_.event_seconds.push_back(gpu_seconds(t));
  }

  void import_memory() {
    Timeline& tl = out_.timeline;
    int64_t cpu_only = 0, without_totals = 0;
    std::vector<const KinetoEvent*> samples;  // files need not be in time order
    for (const KinetoEvent& e : events()) {
      if (e.name != "[memory]" || !in_step(e.ts)) continue;
      if (e.device_type != 1) {
        ++cpu_only;
        continue;
      }
      if (e.total_allocated < 0 || e.total_reserved < 0) {
        ++without_totals;
        continue;
      }
      samples.push_back(&e);
    }
    std::stable_sort(samples.begin(), samples.end(),
                     [](const KinetoEvent* a, const KinetoEvent* b) { return a->ts < b->ts; });
    for (const KinetoEvent* sample : samples) {
      const KinetoEvent& e = *sample;
      tl.memory.push_back({gpu_seconds(e.ts), e.total_allocated, e.total_reserved});
      tl.summary.peak_allocated_bytes = std::max(tl.summary.peak_allocated_bytes, e.total_allocated);
      tl.summary.peak_reserved_bytes = std::max(tl.summary.peak_reserved_bytes, e.total_reserved);
    }
    if (without_totals > 0) {
      warn(fmt::format("{} CUDA [memory] events carry no 'Total Allocated'/'Total Reserved' "
                       "(older PyTorch): left out of the memory curve",
                       without_totals));
    }
    if (tl.memory.empty() && without_totals == 0) {
      warn(cpu_only > 0 ? fmt::format("{} [memory] events, all for CPU memory: no GPU memory curve", cpu_only)
                        : std::string("no [memory] events (profile with profile_memory=True): no "
                                      "measured memory curve"));
    }
  }

  // Seconds from the step's first GPU activity at which the GPU reaches host time t.
  double gpu_seconds(double t) const {
    const auto it = std::upper_bound(host_to_gpu_.begin(), host_to_gpu_.end(), std::pair{t, 1e300});
    if (it == host_to_gpu_.begin()) return 0;
    return (std::prev(it)->second - origin_) * 1e-6;
  }

  static constexpr int64_t kNoThread = INT64_MIN;

  KinetoTrace trace_;
  ImportOptions options_;
  ImportedTrace out_;
  kineto::KinetoStep step_;
  kineto::CpuIndex cpu_;
  double origin_ = 0;
  std::vector<std::pair<double, double>> host_to_gpu_;  // (launch ts, GPU start), µs
  ThreadIndex recompute_index_;
  std::map<std::string, int64_t> module_ids_;
  std::map<std::string, int64_t> traced_of_name_;  // any module range name -> traced module
  std::vector<ModuleCall> forward_calls_, backward_calls_, fsdp_backward_, recompute_calls_;
  std::vector<int64_t> recompute_thread_;
  std::vector<double> final_callbacks_;
  IntervalIndex forward_index_, backward_index_;
  std::vector<double> cpu_event_times_;
};

class KinetoImporter : public TraceImporter {
 public:
  std::string name() const override { return "kineto"; }
  ImportedTrace import(const std::string& path, const ImportOptions& options) const override {
    return KinetoAnalysis(path, read_kineto_trace(path), options).run();
  }
};

}  // namespace

std::unique_ptr<TraceImporter> make_kineto_importer() {
  return std::make_unique<KinetoImporter>();
}

}  // namespace shardplan
