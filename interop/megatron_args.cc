// Reading a Megatron-LM command line into its arguments, as Megatron's argparse would
// (allow_abbrev=False: only whole flag names).
#include <fmt/format.h>

#include <algorithm>

#include "interop/internal/embedded.h"
#include "interop/internal/megatron.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

bool is_flag(const std::string& word) {
  return word.size() > 2 && word.rfind("--", 0) == 0;
}

bool is_script(const std::string& word) {
  return word.size() > 3 && word.compare(word.size() - 3, 3, ".py") == 0;
}

// A bash array's brackets (`MODEL_ARGS=(`, `)`) and `NAME=value` assignments.
bool is_shell_syntax(const std::string& word) {
  if (word == ")" || word == "(") return true;
  const std::size_t eq = word.find('=');
  if (eq == std::string::npos || eq == 0 || word[0] == '-') return false;
  return std::all_of(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

// torchrun's (torch.distributed.run's) own flags, with '_' read as '-': whether each
// takes a value. Megatron has none of these names.
const std::map<std::string, bool>& launcher_flags() {
  static const std::map<std::string, bool> flags = {{"--nproc-per-node", true},
                                                    {"--nnodes", true},
                                                    {"--node-rank", true},
                                                    {"--master-addr", true},
                                                    {"--master-port", true},
                                                    {"--rdzv-backend", true},
                                                    {"--rdzv-endpoint", true},
                                                    {"--rdzv-id", true},
                                                    {"--rdzv-conf", true},
                                                    {"--max-restarts", true},
                                                    {"--monitor-interval", true},
                                                    {"--start-method", true},
                                                    {"--role", true},
                                                    {"--log-dir", true},
                                                    {"--redirects", true},
                                                    {"--tee", true},
                                                    {"--local-ranks-filter", true},
                                                    {"--local-addr", true},
                                                    {"--standalone", false},
                                                    {"--no-python", false},
                                                    {"--run-path", false},
                                                    {"--module", false}};
  return flags;
}

std::optional<int64_t> launcher_count(const std::string& value) {
  if (value.empty() || value.size() > 6 ||
      value.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int64_t n = std::stoll(value);
  return n > 0 ? std::optional<int64_t>(n) : std::nullopt;
}

// The launcher's GPU count: --nproc-per-node × --nnodes, when both are plain numbers.
void launcher_gpus(const std::map<std::string, std::string>& launcher, MegatronArgs& args) {
  const auto per_node = launcher.find("--nproc-per-node");
  if (per_node == launcher.end()) return;
  const auto nodes = launcher.find("--nnodes");
  const std::optional<int64_t> n = launcher_count(per_node->second);
  const std::optional<int64_t> m =
      nodes == launcher.end() ? std::optional<int64_t>(1) : launcher_count(nodes->second);
  if (n && m) {
    args.gpus = *n * *m;
  } else {
    args.not_modelled.push_back(fmt::format(
        "torchrun --nproc-per-node {}{}: not a GPU count shardplan can read (give --gpus)",
        per_node->second, nodes == launcher.end() ? "" : " --nnodes " + nodes->second));
  }
}

}  // namespace

const std::map<std::string, MegatronFlag>& megatron_flags() {
  static const std::map<std::string, MegatronFlag> flags = [] {
    std::map<std::string, MegatronFlag> table;
    const EmbeddedFile& file = interop_data_file("megatron_flags");
    const nlohmann::json json = parse_json_text(file.text, std::string(file.origin));
    for (const auto& [name, entry] : json.at("flags").items()) {
      table[name] =
          MegatronFlag{entry.at("dest").get<std::string>(), entry.at("arity").get<std::string>(),
                       entry.value("action", std::string())};
    }
    return table;
  }();
  return flags;
}

std::string megatron_flag_for(const std::string& dest) {
  std::string plain = "--" + dest;
  std::replace(plain.begin(), plain.end(), '_', '-');
  const auto& flags = megatron_flags();
  const auto it = flags.find(plain);
  if (it != flags.end() && it->second.dest == dest) return plain;
  for (const auto& [name, flag] : flags) {
    if (flag.dest == dest) return name;
  }
  return plain;
}

MegatronArgs parse_megatron_words(const std::vector<std::string>& words, const std::string& label) {
  MegatronArgs args;
  const auto& flags = megatron_flags();
  std::vector<std::string> names;
  std::map<std::string, std::string> launcher;
  std::vector<std::string> shell_words;  // commands, scripts, expansions: not arguments
  std::size_t i = 0;
  auto takes_value = [&](std::size_t at) {
    return at < words.size() && !is_flag(words[at]) && !is_script(words[at]) &&
           !is_shell_syntax(words[at]);
  };
  while (i < words.size()) {
    std::string word = words[i++];
    if ((word.rfind("PYTORCH_CUDA_ALLOC_CONF=", 0) == 0 ||
         word.rfind("PYTORCH_ALLOC_CONF=", 0) == 0) &&
        word.find("expandable_segments:True") != std::string::npos) {
      args.expandable_segments = true;
    }
    if (is_shell_syntax(word)) continue;
    if (!is_flag(word)) {
      shell_words.push_back(word);
      continue;
    }
    std::optional<std::string> inline_value;
    if (const std::size_t eq = word.find('='); eq != std::string::npos) {
      inline_value = word.substr(eq + 1);
      word = word.substr(0, eq);
    }
    const auto it = flags.find(word);
    std::string launcher_name = word;
    std::replace(launcher_name.begin() + 2, launcher_name.end(), '_', '-');
    if (const auto l = launcher_flags().find(launcher_name);
        it == flags.end() && l != launcher_flags().end()) {
      std::string value = inline_value.value_or("");
      if (!inline_value && l->second && takes_value(i)) value = words[i++];
      launcher[launcher_name] = value;
      continue;
    }
    std::vector<std::string> values;
    if (inline_value) values.push_back(*inline_value);
    const std::string arity = it == flags.end() ? "many" : it->second.arity;
    if (!inline_value && arity != "none") {
      while (takes_value(i)) {
        values.push_back(words[i++]);
        if (arity == "one" || arity == "optional") break;
      }
    }
    if (it == flags.end()) {
      if (names.empty()) {
        for (const auto& [name, flag] : flags) names.push_back(name);
      }
      const std::optional<std::string> near = closest_name(word, names);
      args.unknown.push_back(word + (near ? " (did you mean " + *near + "?)" : ""));
      continue;
    }
    const MegatronFlag& flag = it->second;
    nlohmann::json value;
    if (flag.arity == "none") {
      if (!values.empty()) {
        throw InputError(label, word, fmt::format("takes no value, got '{}'", values.front()));
      }
      value = flag.action != "store_false";
    } else if (flag.arity == "one") {
      if (values.empty()) throw InputError(label, word, "expects a value");
      value = values.front();
    } else if (flag.arity == "many") {
      if (values.empty()) throw InputError(label, word, "expects one or more values");
      value = values;
    } else {
      value = values.empty() ? nlohmann::json(true) : nlohmann::json(values.front());
    }
    // argparse keeps the last occurrence, as here.
    args.values[flag.dest] = MegatronValue{value, word};
  }
  launcher_gpus(launcher, args);
  if (!launcher.empty()) {
    std::vector<std::string> shown;
    for (const auto& [name, value] : launcher)
      shown.push_back(name + (value.empty() ? "" : " " + value));
    args.ignored.push_back(fmt::format("launcher: {}", fmt::join(shown, ", ")));
  }
  if (!shell_words.empty()) {
    constexpr std::size_t kShown = 6;
    const std::size_t n = std::min(kShown, shell_words.size());
    args.ignored.push_back(fmt::format(
        "{} word(s) that are not arguments ({}{})", shell_words.size(),
        fmt::join(shell_words.begin(), shell_words.begin() + static_cast<std::ptrdiff_t>(n), " "),
        shell_words.size() > n ? " ..." : ""));
  }
  return args;
}

}  // namespace shardplan
