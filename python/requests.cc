#include "python/requests.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>

#include "models/cluster_spec.h"
#include "models/error.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

using nlohmann::json;

const std::vector<std::string>& job_keys() {
  static const std::vector<std::string> keys = {
      "model",          "cluster", "nodes",         "gpus",
      "config",         "set",     "from_megatron", "from_megatron_bridge",
      "from_torchtitan"};
  return keys;
}

// A command's own keys after the job keys (describe, plan, simulate, sweep) or alone.
std::vector<std::string> command_keys(const std::string& command) {
  if (command == "describe") return {"micro_batch", "seq_len", "recompute"};
  if (command == "plan") return {"output", "step_trace", "emit"};
  if (command == "simulate") return {"plan", "trace_out", "timeline_out", "report"};
  if (command == "sweep") {
    return {"space",
            "tp",
            "cp",
            "strategies",
            "dp_outer",
            "prefetch",
            "recompute",
            "micro_batch",
            "fp8",
            "global_batch",
            "global_batch_tokens",
            "mem_cap",
            "jobs",
            "top",
            "no_prune",
            "pareto",
            "csv",
            "report",
            "emit_config",
            "emit"};
  }
  if (command == "pack")
    return {"input", "algorithm", "capacity", "time_limit", "alignment", "output"};
  if (command == "collective") return {"cluster", "nodes", "gpus", "op", "bytes", "ranks", "sweep"};
  return {};
}

bool takes_job(const std::string& command) {
  return command == "describe" || command == "plan" || command == "simulate" || command == "sweep";
}

// The Python name of a JSON value's type: what the caller passed.
std::string python_type(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "None";
    case json::value_t::boolean:
      return "bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "int";
    case json::value_t::number_float:
      return "float";
    case json::value_t::string:
      return "str";
    case json::value_t::array:
      return "list";
    case json::value_t::object:
      return "dict";
    default:
      return "other";
  }
}

// `"8" (str)`: the value, cut short, and its type.
std::string shown(const json& value) {
  constexpr std::size_t kMaxChars = 60;
  std::string text = value.dump();
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars - 3) + "...";
  return text + " (" + python_type(value) + ")";
}

// Reads a request's values by key; each error is an InputError naming the key.
class RequestReader {
 public:
  RequestReader(const json& request, const std::string& command)
      : request_(request), label_(request_label(command)) {
    if (!request_.is_object()) fail("", "expected a dict of request keys, got " + shown(request_));
    const std::vector<std::string> keys = request_keys(command);
    for (const auto& item : request_.items()) {
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end())
        fail(item.key(), unknown_name_message("request key", item.key(), keys));
    }
  }

  // Given, and not None.
  bool has(const std::string& key) const {
    return request_.contains(key) && !request_.at(key).is_null();
  }

  const json& at(const std::string& key) const { return request_.at(key); }

  std::string text(const std::string& key, const std::string& fallback = "") const {
    if (!has(key)) return fallback;
    const json& value = at(key);
    if (!value.is_string()) fail(key, "expected a str, got " + shown(value));
    return value.get<std::string>();
  }

  // A path that must name an existing file, as the CLI's flag checks (CLI::ExistingFile).
  std::string existing_file(const std::string& key) const {
    const std::string path = text(key);
    if (path.empty()) {
      // Given as "": not "no file" (which would plan the default job), a path to nothing.
      if (has(key)) fail(key, "an empty path names no file");
      return path;
    }
    std::error_code error;
    const auto status = std::filesystem::status(path, error);
    if (!std::filesystem::exists(status)) fail(key, "file does not exist: " + path);
    if (std::filesystem::is_directory(status)) fail(key, "is a directory, not a file: " + path);
    return path;
  }

  // A size such as "64MiB" or a number of bytes.
  std::string size_text(const std::string& key) const {
    if (has(key) && at(key).is_number_integer()) {
      return std::to_string(whole_number(key, 0).value());
    }
    if (has(key) && !at(key).is_string()) {
      fail(key,
           "expected a size (a str such as \"64MiB\", or an int of bytes), got " + shown(at(key)));
    }
    return text(key);
  }

  // A whole number of at least `min` (the CLI's positive_whole_number for min = 1).
  std::optional<int64_t> whole_number(const std::string& key, int64_t min,
                                      int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!has(key)) return std::nullopt;
    const int64_t value = whole_number_of(key, at(key), "a whole number");
    if (value < min) {
      fail(key, min == 1
                    ? "must be positive, got " + std::to_string(value)
                    : "must be at least " + std::to_string(min) + ", got " + std::to_string(value));
    }
    if (value > max) {
      fail(key, "must be at most " + std::to_string(max) + ", got " + std::to_string(value));
    }
    return value;
  }

  // An int-sized whole number (no range of its own: the command checks it).
  std::optional<int> small_whole_number(const std::string& key) const {
    const auto value =
        whole_number(key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    if (!value) return std::nullopt;
    return static_cast<int>(*value);
  }

  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const json& value = at(key);
    if (!value.is_number()) fail(key, "expected a number, got " + shown(value));
    return value.get<double>();
  }

  bool flag(const std::string& key) const {
    if (!has(key)) return false;
    const json& value = at(key);
    if (!value.is_boolean()) fail(key, "expected True or False, got " + shown(value));
    return value.get<bool>();
  }

  // A list (or one value) of whole numbers, as a comma-separated flag takes.
  std::vector<int64_t> whole_numbers(const std::string& key) const {
    std::vector<int64_t> values;
    if (!has(key)) return values;
    const json& value = at(key);
    const std::string expected = "a list of whole numbers";
    if (!value.is_array()) {
      values.push_back(whole_number_of(key, value, expected));
      return values;
    }
    for (const json& element : value) values.push_back(whole_number_of(key, element, expected));
    return values;
  }

  // A list (or one) of strings.
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> values;
    if (!has(key)) return values;
    const json& value = at(key);
    if (value.is_string()) return {value.get<std::string>()};
    if (!value.is_array()) fail(key, "expected a list of str, got " + shown(value));
    for (const json& element : value) {
      if (!element.is_string()) {
        fail(key, "expected a list of str, got " + shown(value) + " holding " + shown(element));
      }
      values.push_back(element.get<std::string>());
    }
    return values;
  }

  // One of `names`.
  std::string choice(const std::string& key, const std::vector<std::string>& names,
                     const std::string& what) const {
    const std::string value = text(key);
    if (!value.empty() && std::find(names.begin(), names.end(), value) == names.end())
      fail(key, unknown_name_message(what, value, names));
    return value;
  }

  // A request key the command needs.
  void require(const std::string& key, const std::string& what) const {
    if (!has(key)) fail(key, "required: " + what);
  }

  [[noreturn]] void fail(const std::string& key, const std::string& reason) const {
    throw InputError(label_, key, reason);
  }

 private:
  int64_t whole_number_of(const std::string& key, const json& value,
                          const std::string& expected) const {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(key, "out of range for a 64-bit whole number, got " + value.dump());
    }
    // An int beyond 64 bits reaches here as a float (JSON numbers have no size).
    if (value.is_number_float() && std::abs(value.get<double>()) >= 0x1p63 &&
        std::floor(value.get<double>()) == value.get<double>()) {
      fail(key, "out of range for a 64-bit whole number, got " + value.dump());
    }
    if (!value.is_number_integer()) fail(key, "expected " + expected + ", got " + shown(value));
    return value.get<int64_t>();
  }

  const json& request_;
  std::string label_;
};

// --set as a list of "key=value" or a dict {key: value}; a value goes in as its JSON text,
// which apply_overrides reads back as the same value.
std::vector<std::string> overrides(const RequestReader& r) {
  if (!r.has("set")) return {};
  const json& value = r.at("set");
  if (!value.is_object()) return r.strings("set");
  std::vector<std::string> assignments;
  for (const auto& item : value.items())
    assignments.push_back(item.key() + "=" + item.value().dump());
  return assignments;
}

JobParams job_params(const RequestReader& r) {
  JobParams job;
  if (r.has("model")) {
    if (r.at("model").is_object()) {
      job.model_json = r.at("model");
    } else if (!r.at("model").is_string()) {
      r.fail("model",
             "expected a zoo name or file (str) or a model (dict), got " + shown(r.at("model")));
    } else {
      job.model = r.text("model");
    }
  }
  job.cluster = r.text("cluster", kDefaultCluster);
  job.nodes = r.whole_number("nodes", 1);
  job.gpus = r.whole_number("gpus", 1);
  if (r.has("config")) {
    if (r.at("config").is_object()) {
      job.config_json = r.at("config");
    } else if (!r.at("config").is_string()) {
      r.fail("config",
             "expected a config file (str) or config fields (dict), got " + shown(r.at("config")));
    } else {
      job.config_file = r.existing_file("config");
    }
  }
  job.overrides = overrides(r);
  job.from_megatron = r.text("from_megatron");
  if (r.has("from_megatron") && job.from_megatron.find_first_not_of(" \t\r\n") == std::string::npos)
    r.fail("from_megatron",
           "nothing to read: give a Megatron-LM command line or a file holding one");
  job.from_megatron_bridge = r.existing_file("from_megatron_bridge");
  job.from_torchtitan = r.existing_file("from_torchtitan");
  return job;
}

}  // namespace

std::string request_label(const std::string& command) {
  return "shardplan." + command;
}

std::vector<std::string> request_keys(const std::string& command) {
  std::vector<std::string> keys = command_keys(command);
  if (takes_job(command)) keys.insert(keys.begin(), job_keys().begin(), job_keys().end());
  return keys;
}

DescribeParams describe_request(const json& request) {
  const RequestReader r(request, "describe");
  DescribeParams p{.job = job_params(r)};
  p.micro_batch = r.whole_number("micro_batch", 1);
  p.seq_len = r.whole_number("seq_len", 1);
  p.recompute = r.choice("recompute", {"none", "selective", "full"}, "recompute mode");
  p.json = true;
  return p;
}

PlanParams plan_request(const json& request) {
  const RequestReader r(request, "plan");
  PlanParams p{.job = job_params(r)};
  p.emit = r.text("emit");
  p.output = r.text("output");
  p.step_trace = r.existing_file("step_trace");
  p.json = true;
  return p;
}

SimulateParams simulate_request(const json& request) {
  const RequestReader r(request, "simulate");
  SimulateParams p{.job = job_params(r)};
  p.plan = r.existing_file("plan");
  if (!p.plan.empty()) {
    for (const char* key : {"model", "nodes", "gpus", "config", "set", "from_megatron",
                            "from_megatron_bridge", "from_torchtitan"}) {
      if (r.has(key)) r.fail(key, "cannot be combined with plan (the plan fixes it)");
    }
  }
  p.cluster_given = r.has("cluster");
  p.trace_out = r.text("trace_out");
  p.timeline_out = r.text("timeline_out");
  p.report = r.text("report");
  p.json = true;
  return p;
}

SweepParams sweep_request(const json& request) {
  const RequestReader r(request, "sweep");
  SweepParams p{.job = job_params(r)};
  p.space_file = r.existing_file("space");
  p.tp = r.whole_numbers("tp");
  p.cp = r.whole_numbers("cp");
  p.strategies = r.strings("strategies");
  p.dp_outer = r.whole_numbers("dp_outer");
  p.prefetch = r.whole_numbers("prefetch");
  p.recompute = r.strings("recompute");
  p.micro_batch = r.whole_numbers("micro_batch");
  p.fp8 = r.flag("fp8");
  p.global_batch = r.whole_number("global_batch", 1);
  p.global_batch_tokens = r.whole_number("global_batch_tokens", 1);
  p.mem_cap = r.size_text("mem_cap");
  p.threads = r.small_whole_number("jobs").value_or(p.threads);
  p.top = r.small_whole_number("top").value_or(p.top);
  p.no_prune = r.flag("no_prune");
  p.pareto = r.flag("pareto");
  p.csv = r.text("csv");
  p.report = r.text("report");
  p.emit_config = r.text("emit_config");
  p.emit = r.text("emit");
  p.json = true;
  return p;
}

PackParams pack_request(const json& request) {
  const RequestReader r(request, "pack");
  PackParams p;
  r.require("input", "a buffer table (id,lower,upper,size CSV) or a plan.json");
  p.input = r.existing_file("input");
  p.algorithm = r.text("algorithm", p.algorithm);
  p.capacity = r.whole_number("capacity", 1);
  p.time_limit_seconds = r.number("time_limit", p.time_limit_seconds);
  p.alignment = r.whole_number("alignment", 1).value_or(p.alignment);
  p.output = r.text("output");
  p.json = true;
  return p;
}

CollectiveParams collective_request(const json& request) {
  const RequestReader r(request, "collective");
  CollectiveParams p;
  p.cluster = r.text("cluster", kDefaultCluster);
  p.nodes = r.whole_number("nodes", 1);
  p.gpus = r.whole_number("gpus", 1);
  r.require("op", "all_gather, reduce_scatter or all_reduce");
  p.op = r.text("op");
  p.bytes = r.size_text("bytes");
  p.ranks = r.whole_number("ranks", 1);
  p.sweep = r.flag("sweep");
  p.json = true;
  return p;
}

}  // namespace shardplan
