#include "planner/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <tuple>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "planner/memory_estimate.h"

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

SearchSpace default_search_space(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& base) {
  SearchSpace s;
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
  s.fp8_param_gather = {false};
  if (cluster.gpu.fp8_dense_flops > 0) s.fp8_param_gather.push_back(true);
  s.double_buffer = {false};
  s.allocators = {Allocator::caching};
  return s;
}

SearchSpace search_space_from_json(const nlohmann::json& json, const std::string& label,
                                   SearchSpace s) {
  const JsonReader r(json, label);
  r.expect_only({"sharding_strategy", "dp_outer", "outer_strategy", "bucket_bytes", "prefetch",
                 "recompute", "micro_batch", "global_batch_sequences", "global_batch_tokens",
                 "fp8_param_gather", "double_buffer", "allocator"});
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
  if (r.has("global_batch_sequences"))
    s.global_batch_sequences = r.positive_integer("global_batch_sequences");
  if (r.has("global_batch_tokens")) {
    // Kept as tokens until the sequence length is known: negative marks tokens.
    s.global_batch_sequences = -r.positive_integer("global_batch_tokens");
  }
  if (r.has("fp8_param_gather"))
    s.fp8_param_gather = parse_list<bool>(r, "fp8_param_gather", boolean);
  if (r.has("double_buffer")) s.double_buffer = parse_list<bool>(r, "double_buffer", boolean);
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
       {s.strategies.size(), s.dp_outer.size(), s.outer_strategies.size(), s.bucket_bytes.size(),
        s.prefetch.size(), s.recompute.size(), s.micro_batches.size(), s.fp8_param_gather.size(),
        s.double_buffer.size(), s.allocators.size()}) {
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
  if (batch < 0) batch = -batch / std::max<int64_t>(base.seq_len, 1);  // from tokens
  std::vector<FsdpConfig> out;
  for (ShardingStrategy strategy : space.strategies) {
    for (int64_t outer : space.dp_outer) {
      const std::vector<OuterStrategy> outers =
          outer > 1 ? space.outer_strategies : std::vector<OuterStrategy>{OuterStrategy::no_shard};
      for (OuterStrategy outer_strategy : outers) {
        for (const std::optional<int64_t>& bucket : space.bucket_bytes) {
          for (int64_t prefetch : space.prefetch) {
            for (Recompute recompute : space.recompute) {
              for (int64_t micro_batch : space.micro_batches) {
                for (bool fp8 : space.fp8_param_gather) {
                  for (bool double_buffer : space.double_buffer) {
                    for (Allocator allocator : space.allocators) {
                      FsdpConfig c = base;
                      c.sharding_strategy = strategy;
                      c.dp_outer = outer;
                      c.dp_shard = num_gpus % outer == 0 ? num_gpus / outer : 0;
                      c.outer_strategy = outer_strategy;
                      c.bucket_bytes = bucket;
                      c.forward_prefetch = c.backward_prefetch = prefetch;
                      c.recompute = recompute;
                      c.micro_batch = micro_batch;
                      // The global batch fixes micro_batch × grad_accum per GPU; 0 marks a
                      // micro-batch that does not divide it (reported as invalid).
                      const int64_t per_gpu = batch > 0 ? batch / num_gpus : 0;
                      c.grad_accum = batch <= 0 ? base.grad_accum
                                     : (batch % num_gpus == 0 && per_gpu % micro_batch == 0)
                                         ? per_gpu / micro_batch
                                         : 0;
                      c.fp8_param_gather = fp8;
                      c.double_buffer = double_buffer;
                      c.allocator = allocator;
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
  return out;
}

double memory_lower_bound(const ModelSpec& model, const ClusterSpec& cluster,
                          const FsdpConfig& resolved) {
  const MemoryEstimate e = estimate_memory(model, cluster, resolved);
  double bound = e.model_weights + e.main_weights + e.main_grads + e.optimizer_states +
                 e.double_buffers + e.non_tensor;
  // Under ZeRO-3 some unit's weights are gathered at every moment of the step.
  if (e.unsharded_weights > 0) {
    const double gathered =
        resolved.fp8_param_gather ? 1.0 : static_cast<double>(dtype_bytes(resolved.param_dtype));
    bound += gathered * static_cast<double>(e.largest_unit_parameters);
  }
  return bound;
}

std::string describe_config(const FsdpConfig& c) {
  std::string text =
      fmt::format("{} {}×{}", strategy_short(c.sharding_strategy), c.dp_shard, c.dp_outer);
  if (c.dp_outer > 1) text += fmt::format("({})", outer_strategy_name(c.outer_strategy));
  text += fmt::format(" pf{} {} mb{}×ga{}", c.forward_prefetch, recompute_name(c.recompute),
                      c.micro_batch, c.grad_accum);
  if (c.bucket_bytes) text += fmt::format(" bucket{}M", *c.bucket_bytes / 1000000);
  if (c.fp8_param_gather) text += " fp8";
  if (c.double_buffer) text += " dbuf";
  if (c.allocator == Allocator::pool) text += " pool";
  return text;
}

SweepResult sweep_configs(const ModelSpec& model, const ClusterSpec& cluster,
                          const std::vector<FsdpConfig>& configs, const Evaluator& evaluate,
                          const SweepOptions& options) {
  SweepResult result;
  result.memory_cap = options.memory_cap;
  result.points.resize(configs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> finished{0};
  std::mutex progress_mutex;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < configs.size(); i = next++) {
      SweepPoint& p = result.points[i];
      try {
        if (configs[i].grad_accum <= 0) {
          p.config = configs[i];
          p.state = PointState::invalid;
          p.reason = fmt::format("micro_batch {} does not divide the global batch",
                                 configs[i].micro_batch);
        } else {
          // The rules on which knobs combine (FP8 needs ZeRO-3, ...).
          check_fsdp_config(configs[i], "sweep");
          p.config = resolve_fsdp_config(configs[i], model, cluster, "sweep");
          p.memory_lower_bound = memory_lower_bound(model, cluster, p.config);
          if (options.prune && p.memory_lower_bound > static_cast<double>(options.memory_cap)) {
            p.state = PointState::pruned;
            p.reason = "persistent state alone exceeds the memory cap";
          } else {
            p.summary = evaluate(p.config, cluster);
            p.fits = p.summary.peak_reserved_bytes <= options.memory_cap;
          }
        }
      } catch (const InputError& e) {
        p.config = configs[i];
        p.state = PointState::invalid;
        p.reason = e.field().empty() ? e.reason() : e.field() + ": " + e.reason();
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
      const std::size_t done = ++finished;
      if (options.progress) {
        std::lock_guard lock(progress_mutex);
        options.progress(done, configs.size());
      }
    }
  };
  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);

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
