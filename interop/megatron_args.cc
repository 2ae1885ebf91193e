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

int64_t launcher_count(const std::string& flag, const std::string& value,
                       const std::string& label) {
  try {
    std::size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  throw InputError(label, flag,
                   fmt::format("expected a positive whole number, got '{}'{}", value,
                               value.rfind('$', 0) == 0 ? " (an unexpanded shell variable)" : ""));
}

// torchrun / torch.distributed.run / launch flags before the script: the GPU count.
void read_launcher(const std::vector<std::string>& words, std::size_t end, MegatronArgs& args,
                   const std::string& label) {
  int64_t per_node = 0;
  int64_t nodes = 1;
  for (std::size_t i = 0; i < end; ++i) {
    std::string word = words[i];
    std::string value;
    const std::size_t eq = word.find('=');
    if (is_flag(word) && eq != std::string::npos) {
      value = word.substr(eq + 1);
      word = word.substr(0, eq);
    } else if (is_flag(word) && i + 1 < end && !is_flag(words[i + 1])) {
      value = words[i + 1];
    }
    std::replace(word.begin(), word.end(), '_', '-');
    if (word == "--nproc-per-node") per_node = launcher_count(word, value, label);
    if (word == "--nnodes") nodes = launcher_count(word, value, label);
  }
  if (per_node > 0) args.gpus = per_node * nodes;
  if (end > 0) {
    args.ignored.push_back(fmt::format("launcher: {} word(s) before {}", end, words[end]));
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

MegatronArgs parse_megatron_words(const std::vector<std::string>& all_words,
                                  const std::string& label) {
  MegatronArgs args;
  std::vector<std::string> words;
  for (const std::string& word : all_words) {
    if ((word.rfind("PYTORCH_CUDA_ALLOC_CONF=", 0) == 0 ||
         word.rfind("PYTORCH_ALLOC_CONF=", 0) == 0) &&
        word.find("expandable_segments:True") != std::string::npos) {
      args.expandable_segments = true;
    }
    if (!is_shell_syntax(word)) words.push_back(word);
  }
  const auto script = std::find_if(words.begin(), words.end(), is_script);
  std::size_t i = 0;
  if (script != words.end()) {
    i = static_cast<std::size_t>(script - words.begin());
    read_launcher(words, i, args, label);
    ++i;
  }
  const auto& flags = megatron_flags();
  std::vector<std::string> names;
  while (i < words.size()) {
    std::string word = words[i++];
    if (!is_flag(word)) {
      args.unknown.push_back(fmt::format("'{}' (a word without a flag)", word));
      continue;
    }
    std::optional<std::string> inline_value;
    if (const std::size_t eq = word.find('='); eq != std::string::npos) {
      inline_value = word.substr(eq + 1);
      word = word.substr(0, eq);
    }
    std::vector<std::string> values;
    if (inline_value) values.push_back(*inline_value);
    const auto it = flags.find(word);
    const std::string arity = it == flags.end() ? "many" : it->second.arity;
    if (!inline_value && arity != "none") {
      while (i < words.size() && !is_flag(words[i]) && !is_script(words[i])) {
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
  return args;
}

}  // namespace shardplan
