#include "planner/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "models/transformer_builder.h"
#include "planner/memory_estimate.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

int64_t total_parameters(const Module& m) {
  int64_t n = 0;
  for (const Parameter& p : m.parameters) n += p.numel();
  for (const Module& c : m.children) n += total_parameters(c);
  return n;
}

template <typename T, typename Parse>
std::vector<T> parse_list(const JsonReader& r, std::string_view key, Parse parse) {
  const nlohmann::json& value = r.value(key);
  if (!value.is_array() || value.empty()) r.fail(key, "expected a non-empty list");
  std::vector<T> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    out.push_back(parse(value[i], fmt::format("{}/{}", key, i)));
  }
  return out;
}

// The names people use for the strategies (the ZeRO stages; DDP).
std::string_view strategy_short(ShardingStrategy s) {
  static constexpr NameTable<ShardingStrategy, 4> kShort = {
      {{ShardingStrategy::no_shard, "ddp"},
       {ShardingStrategy::optim, "zero1"},
       {ShardingStrategy::optim_grads, "zero2"},
       {ShardingStrategy::optim_grads_params, "zero3"}}};
  return name_of(kShort, s);
}

}  // namespace

int64_t default_memory_cap(const ClusterSpec& cluster) {
  return static_cast<int64_t>(0.95 * static_cast<double>(cluster.gpu.hbm_bytes));
}

namespace {

// A tp and cp of the mesh alone, with everything else from `base`.
FsdpConfig with_mesh(const FsdpConfig& base, int64_t tp, int64_t cp) {
  FsdpConfig c = base;
  c.tp = tp;
  c.cp = cp;
  c.dp_outer = 1;
  c.dp_shard = 0;
  // Sequence parallelism follows tp (Megatron-FSDP runs TP with SP; the base may be a
  // resolved config with it set for its own tp); TP overlap and the CP exchange are the
  // base's where tp, cp > 1.
  c.sequence_parallel.reset();
  if (tp == 1) c.tp_comm_overlap = false;
  if (cp == 1) c.cp_comm = CpComm::p2p;
  return c;
}

// Powers of two from 1 to `most` with which the base config resolves on its own.
std::vector<int64_t> mesh_sizes(const ModelSpec& model, const ClusterSpec& cluster,
                                const FsdpConfig& base, int64_t most, bool tensor) {
  std::vector<int64_t> sizes;
  for (int64_t size = 1; size <= most; size *= 2) {
    try {
      resolve_fsdp_config(with_mesh(base, tensor ? size : 1, tensor ? 1 : size), model, cluster,
                          "sweep");
      sizes.push_back(size);
    } catch (const InputError&) {
    }
  }
  return sizes;
}

}  // namespace

SearchSpace default_search_space(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& base) {
  SearchSpace s;
  if (model.arch != nullptr) {
    // TP beyond 8 is rare even inside larger NVLink domains: heads run out and each GEMM
    // shrinks; the user's --tp list reaches further.
    s.tp = mesh_sizes(model, cluster, base, std::min<int64_t>(8, cluster.gpus_per_node), true);
    s.cp = mesh_sizes(model, cluster, base, 4, false);
  }
  if (s.tp.empty()) s.tp = {base.tp};
  if (s.cp.empty()) s.cp = {base.cp};
  // Replicating every weight, gradient and state only pays off for small models.
  if (total_parameters(model.root) < 2'000'000'000)
    s.strategies.push_back(ShardingStrategy::no_shard);
  s.strategies.insert(s.strategies.end(), {ShardingStrategy::optim, ShardingStrategy::optim_grads,
                                           ShardingStrategy::optim_grads_params});
  for (int64_t outer = 1; outer <= cluster.num_gpus; outer *= 2) {
    if (cluster.num_gpus % outer == 0) s.dp_outer.push_back(outer);
  }
  s.outer_strategies = {OuterStrategy::no_shard, OuterStrategy::optim};
  s.bucket_bytes = {base.bucket_bytes};
  s.prefetch = {0, 1, 2};
  s.recompute = {Recompute::none, Recompute::selective, Recompute::full};
  s.micro_batches = {1, 2, 4};
  s.global_batch_sequences = 4 * cluster.num_gpus;
  // FP8 changes the numerics: the sweep tries it only when asked (the base config's fp8,
  // `--fp8` or the space file), never as a silent speed-up.
  s.fp8 = {fp8_compute(base)};
  s.double_buffer = {false};
  s.allocators = {base.allocator};  // the allocator the job runs with (expandable, ...)
  s.no_sync = {base.no_sync};
  s.ep = {base.ep};
  s.moe_dispatchers = {base.moe_dispatcher};
  if (model.arch != nullptr && model.arch->num_experts > 1) {
    s.ep = {1};
    for (int64_t ep = 8; ep <= model.arch->num_experts && ep <= cluster.num_gpus; ep *= 2) {
      if (model.arch->num_experts % ep == 0 && cluster.num_gpus % ep == 0) s.ep.push_back(ep);
    }
    s.moe_dispatchers = {MoeDispatcher::allgather, MoeDispatcher::alltoall};
    // The base config's own settings stay in the space.
    if (std::find(s.ep.begin(), s.ep.end(), base.ep) == s.ep.end()) s.ep.push_back(base.ep);
    if (std::find(s.moe_dispatchers.begin(), s.moe_dispatchers.end(), base.moe_dispatcher) ==
        s.moe_dispatchers.end())
      s.moe_dispatchers.push_back(base.moe_dispatcher);
  }
  return s;
}

SearchSpace search_space_from_json(const nlohmann::json& json, const std::string& label,
                                   SearchSpace s) {
  const JsonReader r(json, label);
  r.expect_only({"tp", "cp", "sharding_strategy", "dp_outer", "outer_strategy", "bucket_bytes",
                 "prefetch", "recompute", "micro_batch", "global_batch_sequences",
                 "global_batch_tokens", "fp8", "double_buffer", "allocator", "no_sync", "ep",
                 "moe_dispatcher"});
  auto named = [&](auto parse, auto names, const char* what) {
    return [&, parse, names, what](const nlohmann::json& v, const std::string& path) {
      if (!v.is_string()) r.fail(path, "expected a name");
      const auto parsed = parse(v.template get<std::string>());
      if (!parsed) r.fail(path, unknown_name_message(what, v.template get<std::string>(), names()));
      return *parsed;
    };
  };
  auto positive = [&](const nlohmann::json& v, const std::string& path) {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      r.fail(path, "expected a positive integer");
    return v.get<int64_t>();
  };
  auto non_negative = [&](const nlohmann::json& v, const std::string& path) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) r.fail(path, "expected an integer ≥ 0");
    return v.get<int64_t>();
  };
  auto boolean = [&](const nlohmann::json& v, const std::string& path) {
    if (!v.is_boolean()) r.fail(path, "expected true or false");
    return v.get<bool>();
  };
  if (r.has("tp")) s.tp = parse_list<int64_t>(r, "tp", positive);
  if (r.has("cp")) s.cp = parse_list<int64_t>(r, "cp", positive);
  if (r.has("sharding_strategy")) {
    s.strategies = parse_list<ShardingStrategy>(
        r, "sharding_strategy",
        named([](const std::string& t) { return parse_sharding_strategy(t); },
              [] { return sharding_strategy_names(); }, "sharding strategy"));
  }
  if (r.has("dp_outer")) s.dp_outer = parse_list<int64_t>(r, "dp_outer", positive);
  if (r.has("outer_strategy")) {
    s.outer_strategies = parse_list<OuterStrategy>(
        r, "outer_strategy",
        named([](const std::string& t) { return parse_outer_strategy(t); },
              [] { return outer_strategy_names(); }, "outer strategy"));
  }
  if (r.has("bucket_bytes")) {
    s.bucket_bytes = parse_list<std::optional<int64_t>>(
        r, "bucket_bytes", [&](const nlohmann::json& v, const std::string& path) {
          if (v.is_null()) return std::optional<int64_t>{};
          return std::optional<int64_t>{positive(v, path)};
        });
  }
  if (r.has("prefetch")) s.prefetch = parse_list<int64_t>(r, "prefetch", non_negative);
  if (r.has("recompute")) {
    s.recompute = parse_list<Recompute>(
        r, "recompute", [&](const nlohmann::json& v, const std::string& path) {
          if (!v.is_string()) r.fail(path, "expected a name");
          return parse_recompute(v.get<std::string>(), r.file(), r.path_of(path));
        });
  }
  if (r.has("micro_batch")) s.micro_batches = parse_list<int64_t>(r, "micro_batch", positive);
  if (r.has("global_batch_sequences") && r.has("global_batch_tokens"))
    r.fail("global_batch_tokens", "give the global batch in sequences or in tokens, not both");
  // At most kMaxGradAccum micro-batches on each of kMaxGpus GPUs: anything larger is no
  // batch any job runs, and would overflow the split into micro-batches.
  constexpr int64_t kMaxSequences = limits::kMaxGradAccum * limits::kMaxGpus;
  if (r.has("global_batch_sequences"))
    s.global_batch_sequences = r.integer_in("global_batch_sequences", 1, kMaxSequences);
  if (r.has("global_batch_tokens")) {
    // Kept as tokens until the sequence length is known: negative marks tokens. 2^62 (inside
    // int64) is the sequence bound at the longest micro-batch's tokens, over 4.
    s.global_batch_sequences = -r.integer_in("global_batch_tokens", 1,
                                             kMaxSequences / 4 * limits::kMaxTokensPerMicroBatch);
  }
  if (r.has("fp8")) s.fp8 = parse_list<bool>(r, "fp8", boolean);
  if (r.has("double_buffer")) s.double_buffer = parse_list<bool>(r, "double_buffer", boolean);
  if (r.has("no_sync")) s.no_sync = parse_list<bool>(r, "no_sync", boolean);
  if (r.has("ep")) s.ep = parse_list<int64_t>(r, "ep", positive);
  if (r.has("moe_dispatcher")) {
    s.moe_dispatchers = parse_list<MoeDispatcher>(
        r, "moe_dispatcher",
        named([](const std::string& t) { return parse_moe_dispatcher(t); },
              [] { return moe_dispatcher_names(); }, "moe_dispatcher"));
  }
  if (r.has("allocator")) {
    s.allocators =
        parse_list<Allocator>(r, "allocator",
                              named([](const std::string& t) { return parse_allocator(t); },
                                    [] { return allocator_names(); }, "allocator"));
  }
  // Every configuration is planned and kept with its summary (about 1 KB each): a space
  // past 100 000 of them would take hours and gigabytes, and is a typo more often than not.
  constexpr int64_t kMaxConfigs = 100'000;
  int64_t configs = 1;
  for (const std::size_t n :
       {s.tp.size(), s.cp.size(), s.strategies.size(), s.dp_outer.size(), s.outer_strategies.size(),
        s.bucket_bytes.size(), s.prefetch.size(), s.recompute.size(), s.micro_batches.size(),
        s.fp8.size(), s.double_buffer.size(), s.allocators.size(), s.no_sync.size(), s.ep.size(),
        s.moe_dispatchers.size()}) {
    configs = std::min<int64_t>(configs * static_cast<int64_t>(std::max<std::size_t>(n, 1)),
                                kMaxConfigs + 1);
  }
  if (configs > kMaxConfigs) {
    r.fail("", fmt::format("the lists multiply to more than {} configurations; search in stages",
                           kMaxConfigs));
  }
  return s;
}

std::vector<FsdpConfig> enumerate_configs(const SearchSpace& space, const FsdpConfig& base,
                                          int64_t num_gpus) {
  int64_t batch = space.global_batch_sequences;
  if (batch < 0) {  // from tokens
    const int64_t seq_len = std::max<int64_t>(base.seq_len, 1);
    if (-batch % seq_len != 0) {
      throw InputError("sweep", "global_batch_tokens",
                       fmt::format("{} tokens is not a whole number of {}-token sequences "
                                   "(seq_len); give a multiple of it",
                                   -batch, seq_len));
    }
    batch = -batch / seq_len;
  }
  std::vector<FsdpConfig> out;
  for (int64_t tp : space.tp) {
    for (int64_t cp : space.cp) {
      const FsdpConfig mesh = with_mesh(base, tp, cp);
      // Sequences per data-parallel rank: the tp × cp ranks of one replica share theirs.
      const int64_t model_ranks = tp * cp;
      const int64_t dp_ranks = num_gpus % model_ranks == 0 ? num_gpus / model_ranks : 0;
      // The expert settings change the rank's model: next to the mesh, so that
      // consecutive points share one (RankModel keeps a few).
      for (int64_t ep : space.ep) {
        FsdpConfig experts = mesh;
        experts.ep = ep;
        // With every expert whole on every rank (ep · etp = 1) no dispatcher moves tokens:
        // the first one listed stands for all.
        const bool no_dispatch = ep * expert_tp(experts) == 1;
        for (MoeDispatcher dispatcher : space.moe_dispatchers) {
          if (no_dispatch && dispatcher != space.moe_dispatchers.front()) continue;
          for (ShardingStrategy strategy : space.strategies) {
            for (int64_t outer : space.dp_outer) {
              // HSDP on an expert mesh is not modelled (fsdp_config.cc): those points are
              // left out rather than listed as invalid.
              if (expert_mesh(experts) && outer > 1) continue;
              const std::vector<OuterStrategy> outers =
                  outer > 1 ? space.outer_strategies
                            : std::vector<OuterStrategy>{OuterStrategy::no_shard};
              for (OuterStrategy outer_strategy : outers) {
                for (const std::optional<int64_t>& bucket : space.bucket_bytes) {
                  for (int64_t prefetch : space.prefetch) {
                    for (Recompute recompute : space.recompute) {
                      for (int64_t micro_batch : space.micro_batches) {
                        for (bool fp8 : space.fp8) {
                          for (bool double_buffer : space.double_buffer) {
                            for (Allocator allocator : space.allocators) {
                              for (bool no_sync : space.no_sync) {
                                {
                                  {
                                    FsdpConfig c = mesh;
                                    c.sharding_strategy = strategy;
                                    c.dp_outer = outer;
                                    // 0: resolve infers it, or says why the mesh does not tile.
                                    c.dp_shard = 0;
                                    c.outer_strategy = outer_strategy;
                                    c.bucket_bytes = bucket;
                                    c.forward_prefetch = c.backward_prefetch = prefetch;
                                    c.recompute = recompute;
                                    c.micro_batch = micro_batch;
                                    // The global batch fixes micro_batch × grad_accum per
                                    // data-parallel rank; 0 marks a micro-batch that does not
                                    // divide it (reported as invalid).
                                    const int64_t per_rank = dp_ranks > 0 ? batch / dp_ranks : 0;
                                    c.grad_accum = batch <= 0 ? base.grad_accum
                                                   : (dp_ranks > 0 && batch % dp_ranks == 0 &&
                                                      per_rank % micro_batch == 0)
                                                       ? per_rank / micro_batch
                                                       : 0;
                                    // FP8 GEMMs; under ZeRO-3 on FP8 weights (the only FP8 there
                                    // that Megatron-FSDP runs), else on bf16 weights.
                                    c.fp8 = fp8;
                                    c.fp8_param_gather = fp8 && sharding_traits(c).shard_params;
                                    c.double_buffer = double_buffer;
                                    c.allocator = allocator;
                                    c.no_sync = no_sync;
                                    c.ep = ep;
                                    c.moe_dispatcher = dispatcher;
                                    out.push_back(std::move(c));
                                  }
                                }
                              }
                            }
                          }
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

double memory_lower_bound(const ModelSpec& model, const ClusterSpec& cluster,
                          const FsdpConfig& resolved) {
  const MemoryEstimate e = estimate_memory(model, cluster, resolved);
  // PyTorch FSDP's main grads appear with the first reduction, after the moment below.
  const double persistent = e.model_weights + e.main_weights +
                            (e.main_grads_transient ? 0.0 : e.main_grads) + e.optimizer_states +
                            e.double_buffers + e.non_tensor;
  const double gathered =
      resolved.fp8_param_gather ? 1.0 : static_cast<double>(dtype_bytes(resolved.param_dtype));
  // ZeRO-3 without double buffering: weights gathered into transient buffers.
  const bool gathers = e.unsharded_weights > 0;
  // The first backward op of the last layer holds every unit's saved activations (its
  // own still being read), the root unit's weights (gathered from the first forward to
  // the last backward) and its own gathered weights; whichever layer is last holds at
  // least the smallest's.
  double first_backward = e.saved_activations;
  if (gathers) {
    first_backward +=
        gathered * static_cast<double>(e.root_unit_parameters + e.smallest_layer_parameters);
  }
  // Under ZeRO-3 some unit's weights are gathered at every moment of the step.
  const double any_moment =
      gathers ? gathered * static_cast<double>(e.largest_unit_parameters) : 0.0;
  return persistent + std::max(first_backward, any_moment);
}

std::string describe_config(const FsdpConfig& c) {
  // dp_shard 0: a point whose mesh does not tile the GPUs has none.
  std::string text = fmt::format("{} {}×{}", strategy_short(c.sharding_strategy),
                                 c.dp_shard > 0 ? std::to_string(c.dp_shard) : "?", c.dp_outer);
  if (c.dp_outer > 1) text += fmt::format("({})", outer_strategy_name(c.outer_strategy));
  if (c.tp > 1) {
    text += fmt::format(" tp{}", c.tp);
    if (!sequence_parallel(c)) text += "(no-sp)";
    if (c.tp_comm_overlap) text += "(overlap)";
  }
  if (c.cp > 1) {
    text += fmt::format(" cp{}", c.cp);
    if (c.cp_comm != CpComm::p2p) text += fmt::format("({})", cp_comm_name(c.cp_comm));
  }
  // A point whose global batch does not split has no grad_accum: "ga?".
  text += fmt::format(" pf{} {} mb{}×ga{}", c.forward_prefetch, recompute_label(c), c.micro_batch,
                      c.grad_accum > 0 ? std::to_string(c.grad_accum) : "?");
  if (c.bucket_bytes) text += fmt::format(" bucket{}M", *c.bucket_bytes / 1000000);
  if (fp8_compute(c)) text += " fp8";
  if (c.stack != Stack::megatron_te) {
    text += fmt::format(" {}", stack_name(c.stack));
    if (c.sdpa_backend == SdpaBackend::flash) text += "(fa2)";
    if (c.loss_kernel != LossKernel::upcast)
      text += fmt::format(" {}-loss", loss_kernel_name(c.loss_kernel));
  }
  if (c.ep > 1) text += fmt::format(" ep{}", c.ep);
  if (c.etp > 0 && c.etp != c.tp) text += fmt::format(" etp{}", c.etp);
  if (c.moe_dispatcher == MoeDispatcher::alltoall) text += " a2a";
  if (deduplicates_tokens(c.moe_dispatcher))
    text += fmt::format(" {}", moe_dispatcher_name(c.moe_dispatcher));
  if (c.double_buffer) text += " dbuf";
  if (c.no_sync) text += " no_sync";
  if (c.offload_activations > 0) text += fmt::format(" offload{}", c.offload_activations);
  if (c.allocator != Allocator::caching) text += fmt::format(" {}", allocator_name(c.allocator));
  if (c.cuda_graphs.any())
    text += fmt::format(" graphs({})", fmt::join(cuda_graph_scope_list(c.cuda_graphs), "+"));
  return text;
}

FsdpConfig compute_class(const FsdpConfig& config) {
  FsdpConfig c = config;
  const FsdpConfig defaults;
  c.sharding_strategy = defaults.sharding_strategy;
  c.dp_shard = defaults.dp_shard;
  c.dp_outer = defaults.dp_outer;
  c.outer_strategy = defaults.outer_strategy;
  c.bucket_bytes = defaults.bucket_bytes;
  c.forward_prefetch = defaults.forward_prefetch;
  c.backward_prefetch = defaults.backward_prefetch;
  c.async_reduce = defaults.async_reduce;
  c.max_live_grad_buffers = defaults.max_live_grad_buffers;
  c.main_param_dtype = defaults.main_param_dtype;
  c.main_grad_dtype = defaults.main_grad_dtype;
  c.grad_reduce_dtype = defaults.grad_reduce_dtype;
  c.keep_fp8_transpose_cache = defaults.keep_fp8_transpose_cache;
  c.double_buffer = defaults.double_buffer;
  c.allocator = defaults.allocator;
  c.optimizer = defaults.optimizer;
  c.grad_accum = 1;
  return c;
}

namespace {

// Runs `work(i)` for i in [0, n) on `threads` threads; the first exception is rethrown.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        work(i);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const auto extra = static_cast<std::size_t>(std::max(1, threads) - 1);
  for (std::size_t t = 0; t < std::min(extra, n); ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Configurations already simulated, for the skipping rule of SweepOptions.
class Frontier {
 public:
  Frontier(int64_t keep, bool pareto)
      : keep_(static_cast<std::size_t>(std::max<int64_t>(keep, 1))), pareto_(pareto) {}

  void add(const TimelineSummary& s, bool fits) {
    done_.emplace_back(s.step_seconds, s.peak_reserved_bytes);
    if (fits) {
      fastest_.insert(std::upper_bound(fastest_.begin(), fastest_.end(), s.step_seconds),
                      s.step_seconds);
      if (fastest_.size() > keep_) fastest_.pop_back();
    }
  }
  // Whether a configuration whose step is at least `step_bound` and whose peak is at
  // least `memory_bound` can reach neither the fastest `keep` nor (when kept) the Pareto
  // front.
  bool excludes(double step_bound, double memory_bound) const {
    if (fastest_.size() < keep_ || step_bound <= fastest_.back()) return false;
    if (!pareto_) return true;
    return std::any_of(done_.begin(), done_.end(), [&](const auto& d) {
      return d.first < step_bound && static_cast<double>(d.second) <= memory_bound;
    });
  }
  // The slowest of the fastest `keep` fitting steps (for the pruning reason).
  double threshold() const { return fastest_.back(); }

 private:
  std::size_t keep_;
  bool pareto_;
  std::vector<double> fastest_;  // ascending
  std::vector<std::pair<double, int64_t>> done_;
};

}  // namespace

SweepResult sweep_configs(const ModelSpec& model, const ClusterSpec& cluster,
                          const std::vector<FsdpConfig>& configs, const Evaluator& evaluate,
                          const SweepOptions& options) {
  SweepResult result;
  result.memory_cap = options.memory_cap;
  result.points.resize(configs.size());
  std::atomic<std::size_t> finished{0};
  std::mutex progress_mutex;
  auto progressed = [&](std::size_t count) {
    const std::size_t done = finished += count;
    if (options.progress) {
      std::lock_guard lock(progress_mutex);
      options.progress(done, configs.size());
    }
  };

  // Resolve and bound every configuration (cheap: closed forms).
  parallel_for(configs.size(), options.threads, [&](std::size_t i) {
    SweepPoint& p = result.points[i];
    try {
      if (configs[i].grad_accum <= 0) {
        // The global batch did not split: blame the mesh when it does not tile the GPUs
        // (resolving with one micro-batch says how), else the batch.
        FsdpConfig probe = tile_mesh(configs[i], cluster, "sweep");
        probe.grad_accum = 1;
        check_fsdp_config(probe, "sweep");
        p.config = resolve_fsdp_config(probe, model, cluster, "sweep");
        p.config.grad_accum = 0;
        p.state = PointState::invalid;
        p.reason = fmt::format(
            "the global batch does not split into whole micro-batches of {} sequences over the "
            "{} data-parallel ranks",
            configs[i].micro_batch, p.config.dp_shard * p.config.dp_outer);
      } else {
        // The mesh first: when it does not tile the GPUs, no other rule is the cause.
        tile_mesh(configs[i], cluster, "sweep");
        // The rules on which knobs combine (FP8 needs ZeRO-3, ...).
        check_fsdp_config(configs[i], "sweep");
        p.config = resolve_fsdp_config(configs[i], model, cluster, "sweep");
        p.memory_lower_bound = memory_lower_bound(model, cluster, p.config);
        if (options.prune && p.memory_lower_bound > static_cast<double>(options.memory_cap)) {
          p.state = PointState::pruned;
          p.reason = "persistent state and saved activations alone exceed the memory cap";
        }
      }
    } catch (const InputError& e) {
      p.config = configs[i];
      p.state = PointState::invalid;
      p.reason = e.field().empty() ? e.reason() : e.field() + ": " + e.reason();
    }
    if (p.state != PointState::evaluated) progressed(1);
  });
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (result.points[i].state == PointState::evaluated) order.push_back(i);
  }

  // Step bounds, once per compute class, then the cheapest bound first.
  const bool bound_time = options.prune && options.step_lower_bound != nullptr;
  if (bound_time) {
    std::map<std::string, std::size_t> class_of;  // class key → index into classes
    std::vector<std::size_t> representative;
    std::vector<std::size_t> point_class(configs.size());
    for (std::size_t i : order) {
      const std::string key = fsdp_config_to_json(compute_class(result.points[i].config)).dump();
      const auto [it, added] = class_of.try_emplace(key, representative.size());
      if (added) representative.push_back(i);
      point_class[i] = it->second;
    }
    std::vector<double> per_micro_batch(representative.size());
    parallel_for(representative.size(), options.threads, [&](std::size_t k) {
      per_micro_batch[k] = options.step_lower_bound(result.points[representative[k]].config);
    });
    for (std::size_t i : order) {
      SweepPoint& p = result.points[i];
      p.step_lower_bound =
          static_cast<double>(p.config.grad_accum) * per_micro_batch[point_class[i]];
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return result.points[a].step_lower_bound < result.points[b].step_lower_bound;
    });
  }

  // Simulate in batches; between batches, skip what the bound rules out. The batches do
  // not depend on the thread or process count, so neither does the result.
  const std::function<std::vector<TimelineSummary>(const std::vector<std::size_t>&)> here =
      [&](const std::vector<std::size_t>& indices) {
        std::vector<TimelineSummary> out(indices.size());
        parallel_for(indices.size(), options.threads, [&](std::size_t k) {
          out[k] = evaluate(result.points[indices[k]].config, cluster);
        });
        return out;
      };
  auto run_batch = [&](const std::vector<std::size_t>& batch) {
    return options.batch_evaluator ? options.batch_evaluator(batch, here) : here(batch);
  };
  Frontier frontier(options.keep, options.pareto);
  const std::size_t batch_size = bound_time ? kSweepBatch : order.size();
  std::size_t next = 0;
  while (next < order.size()) {
    std::vector<std::size_t> batch;
    for (; next < order.size() && batch.size() < batch_size; ++next) {
      SweepPoint& p = result.points[order[next]];
      if (bound_time && frontier.excludes(p.step_lower_bound, p.memory_lower_bound)) {
        p.state = PointState::pruned;
        p.reason = fmt::format(
            "its compute stream alone needs {:.4g} s, more than the {} fastest fitting "
            "configurations ({:.4g} s){}",
            p.step_lower_bound, options.keep, frontier.threshold(),
            options.pareto ? " and a faster one needs less memory" : "");
        ++result.pruned_by_time;
        progressed(1);
      } else {
        batch.push_back(order[next]);
      }
    }
    if (batch.empty()) break;
    const std::vector<TimelineSummary> summaries = run_batch(batch);
    progressed(batch.size());
    if (summaries.size() != batch.size())
      throw std::logic_error("sweep: the batch evaluator lost configurations");
    for (std::size_t k = 0; k < batch.size(); ++k) {
      SweepPoint& p = result.points[batch[k]];
      p.summary = summaries[k];
      p.fits = p.summary.peak_reserved_bytes <= options.memory_cap;
      frontier.add(p.summary, p.fits);
    }
  }

  std::vector<std::size_t> evaluated;
  for (std::size_t i = 0; i < result.points.size(); ++i) {
    const SweepPoint& p = result.points[i];
    if (p.state == PointState::evaluated) {
      ++result.evaluated;
      evaluated.push_back(i);
      if (p.fits) result.ranking.push_back(i);
    } else if (p.state == PointState::pruned) {
      ++result.pruned;
    } else {
      ++result.invalid;
    }
  }
  auto faster = [&](std::size_t a, std::size_t b) {
    const TimelineSummary& x = result.points[a].summary;
    const TimelineSummary& y = result.points[b].summary;
    if (x.step_seconds != y.step_seconds) return x.step_seconds < y.step_seconds;
    if (x.peak_reserved_bytes != y.peak_reserved_bytes)
      return x.peak_reserved_bytes < y.peak_reserved_bytes;
    return a < b;
  };
  std::sort(result.ranking.begin(), result.ranking.end(), faster);
  // Pareto front: by step time, a point is on it when it needs less memory than every
  // faster point.
  result.pareto = options.pareto;
  if (!options.pareto) return result;
  std::sort(evaluated.begin(), evaluated.end(), faster);
  int64_t lowest = INT64_MAX;
  for (std::size_t i : evaluated) {
    SweepPoint& p = result.points[i];
    if (p.summary.peak_reserved_bytes < lowest) {
      p.pareto = true;
      lowest = p.summary.peak_reserved_bytes;
    }
  }
  return result;
}

namespace {

std::optional<std::size_t> lowest_peak(const SweepResult& r) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    const SweepPoint& p = r.points[i];
    if (p.state == PointState::evaluated &&
        (!best || p.summary.peak_reserved_bytes < r.points[*best].summary.peak_reserved_bytes))
      best = i;
  }
  return best;
}

// Among pruned points, the least by `key`.
template <typename Key>
std::optional<std::size_t> least_pruned(const SweepResult& r, Key key) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    if (r.points[i].state == PointState::pruned &&
        (!best || key(r.points[i]) < key(r.points[*best])))
      best = i;
  }
  return best;
}

}  // namespace

NoFitAdvice advise_no_fit(const SweepResult& result, const SearchSpace& space,
                          const ModelSpec& model, const ClusterSpec& cluster,
                          const Evaluator& evaluate) {
  NoFitAdvice advice;
  advice.lowest = lowest_peak(result);
  if (!advice.lowest) {
    advice.lowest_bound =
        least_pruned(result, [](const SweepPoint& p) { return p.memory_lower_bound; });
  }
  advice.try_full_recompute = std::find(space.recompute.begin(), space.recompute.end(),
                                        Recompute::full) == space.recompute.end();
  advice.try_micro_batch_one = std::find(space.micro_batches.begin(), space.micro_batches.end(),
                                         1) == space.micro_batches.end();
  advice.grown = advice.lowest;
  if (!advice.grown) {
    advice.grown = least_pruned(result, [](const SweepPoint& p) {
      return std::tuple(p.config.recompute != Recompute::full, p.config.micro_batch,
                        p.memory_lower_bound);
    });
  }
  if (!advice.grown) return advice;
  const FsdpConfig& base = result.points[*advice.grown].config;
  for (int64_t factor = 2; factor <= 64; factor *= 2) {
    const int64_t nodes = cluster.nodes() * factor;
    ClusterSpec bigger = load_cluster(cluster.name, nodes, std::nullopt);
    bigger.compute = cluster.compute;
    FsdpConfig c = base;
    c.dp_shard = 0;
    try {
      c = resolve_fsdp_config(c, model, bigger, "sweep");
    } catch (const InputError&) {
      continue;
    }
    const TimelineSummary s = evaluate(c, bigger);
    if (s.peak_reserved_bytes <= result.memory_cap) {
      advice.fits_on_nodes = nodes;
      advice.fits_on_gpus = bigger.num_gpus;
      advice.fits_peak_reserved_bytes = s.peak_reserved_bytes;
      break;
    }
  }
  return advice;
}

}  // namespace shardplan
