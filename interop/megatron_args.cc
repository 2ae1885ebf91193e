// Reading a Megatron-LM command line into its arguments, as Megatron's argparse would
// (allow_abbrev=False: only whole flag names).
#include <fmt/format.h>

#include <algorithm>

#include "interop/internal/embedded.h"
#include "interop/internal/megatron.h"
#include "interop/internal/shell_script.h"
#include "interop/internal/stack_text.h"
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

bool has_flag(const std::vector<std::string>& words) {
  return std::any_of(words.begin(), words.end(), is_flag);
}

// The launchers' own flags, with '_' read as '-': whether each takes a value. torchrun's
// (torch.distributed.run) and the DeepSpeed launcher's (deepspeed/launcher/runner.py, which
// Megatron-DeepSpeed's scripts use); Megatron has none of these names.
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
                                                    {"--module", false},
                                                    {"--num-gpus", true},
                                                    {"--num-nodes", true},
                                                    {"--hostfile", true},
                                                    {"--include", true},
                                                    {"--exclude", true},
                                                    {"--launcher", true}};
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

// The launcher's GPU count: --nproc-per-node (torchrun) or --num-gpus (deepspeed) × the
// nodes, when both are plain numbers.
void launcher_gpus(const std::map<std::string, std::string>& launcher, MegatronArgs& args) {
  auto per_node = launcher.find("--nproc-per-node");
  if (per_node == launcher.end()) per_node = launcher.find("--num-gpus");
  if (per_node == launcher.end()) return;
  auto nodes = launcher.find("--nnodes");
  if (nodes == launcher.end()) nodes = launcher.find("--num-nodes");
  const std::optional<int64_t> n = launcher_count(per_node->second);
  const std::optional<int64_t> m =
      nodes == launcher.end() ? std::optional<int64_t>(1) : launcher_count(nodes->second);
  if (n && m) {
    args.gpus = *n * *m;
  } else {
    args.not_modelled.push_back(fmt::format(
        "{} {}{}: not a GPU count shardplan can read (give --gpus)", per_node->first,
        shown_input(per_node->second),
        nodes == launcher.end() ? "" : " " + nodes->first + " " + shown_input(nodes->second)));
  }
}

// Reads the words of each command in turn, keeping what each word turned out to be.
class WordReader {
 public:
  explicit WordReader(std::string label) : label_(std::move(label)) {}

  void command(const std::vector<std::string>& words);
  MegatronArgs finish();

 private:
  void flag(const std::vector<std::string>& words, std::size_t& i);
  void unknown(const std::string& word);
  void set(const MegatronFlag& flag, const std::string& word, nlohmann::json value);

  std::string label_;
  MegatronArgs args_;
  std::map<std::string, std::string> launcher_;
  std::vector<std::string> other_words_;  // commands, scripts, values left as written
  std::size_t other_count_ = 0;
  UnknownNames unknown_;
  std::vector<std::string> flag_names_;  // for suggestions, built at the first unknown flag
  std::map<std::string, int> repeated_;  // dest -> times given with another value
};

void WordReader::command(const std::vector<std::string>& words) {
  for (std::size_t i = 0; i < words.size();) {
    if (is_flag(words[i])) {
      flag(words, i);
      continue;
    }
    constexpr std::size_t kShown = 6;
    if (other_words_.size() < kShown) other_words_.push_back(shown_input(words[i]));
    ++other_count_;
    ++i;
  }
}

void WordReader::flag(const std::vector<std::string>& words, std::size_t& i) {
  std::string word = words[i++];
  const auto takes_value = [&](std::size_t at) {
    return at < words.size() && !is_flag(words[at]) && !is_script(words[at]);
  };
  std::optional<std::string> inline_value;
  if (const std::size_t eq = word.find('='); eq != std::string::npos) {
    inline_value = word.substr(eq + 1);
    word = word.substr(0, eq);
  }
  const auto& flags = megatron_flags();
  const auto it = flags.find(word);
  std::string launcher_name = word;
  std::replace(launcher_name.begin() + 2, launcher_name.end(), '_', '-');
  if (const auto l = launcher_flags().find(launcher_name);
      it == flags.end() && l != launcher_flags().end()) {
    std::string value = inline_value.value_or("");
    if (!inline_value && l->second && takes_value(i)) value = words[i++];
    launcher_[launcher_name] = value;
    return;
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
    unknown(word);
    return;
  }
  const MegatronFlag& flag = it->second;
  nlohmann::json value;
  if (flag.arity == "none") {
    if (!values.empty()) {
      throw InputError(label_, word,
                       fmt::format("takes no value, got {}", quote_input(values.front())));
    }
    value = flag.action != "store_false";
  } else if (flag.arity == "one") {
    if (values.empty()) throw InputError(label_, word, "expects a value");
    value = values.front();
  } else if (flag.arity == "many") {
    if (values.empty()) throw InputError(label_, word, "expects one or more values");
    value = values;
  } else {
    value = values.empty() ? nlohmann::json(true) : nlohmann::json(values.front());
  }
  set(flag, word, std::move(value));
}

void WordReader::unknown(const std::string& word) {
  unknown_.add(word, [&]() -> std::optional<std::string> {
    if (flag_names_.empty()) {
      for (const auto& [name, flag] : megatron_flags()) flag_names_.push_back(name);
    }
    return closest_name(word, flag_names_);
  });
}

// argparse keeps a flag's last value; a script that appends an override to its arrays
// relies on it, so a repeat is read as Megatron reads it, and noted when it changes the
// value.
void WordReader::set(const MegatronFlag& flag, const std::string& word, nlohmann::json value) {
  const auto previous = args_.values.find(flag.dest);
  if (previous != args_.values.end() && previous->second.value != value) ++repeated_[flag.dest];
  args_.values[flag.dest] = MegatronValue{std::move(value), word};
}

MegatronArgs WordReader::finish() {
  launcher_gpus(launcher_, args_);
  if (!launcher_.empty()) {
    std::vector<std::string> shown;
    for (const auto& [name, value] : launcher_)
      shown.push_back(name + (value.empty() ? "" : " " + shown_input(value)));
    args_.ignored.push_back(fmt::format("launcher: {}", fmt::join(shown, ", ")));
  }
  if (other_count_ > 0) {
    args_.ignored.push_back(fmt::format("{} word(s) that are not arguments ({}{})", other_count_,
                                        fmt::join(other_words_, " "),
                                        other_count_ > other_words_.size() ? " ..." : ""));
  }
  for (const auto& [dest, changes] : repeated_) {
    const MegatronValue& last = args_.values.at(dest);
    args_.not_modelled.push_back(
        fmt::format("{} given {} times with different values: the last ({}) is used, as Megatron's "
                    "argparse does",
                    last.name, changes + 1,
                    last.value.is_string() ? shown_input(last.value.get<std::string>())
                                           : shown_input(last.value.dump())));
  }
  unknown_.append_to(args_.unknown);
  return std::move(args_);
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

MegatronArgs parse_megatron_words(const std::vector<std::vector<std::string>>& commands,
                                  const std::string& label) {
  WordReader reader(label);
  for (const std::vector<std::string>& words : commands) reader.command(words);
  return reader.finish();
}

namespace {

bool expandable_segments(std::string_view name, std::string_view value) {
  return (name == "PYTORCH_CUDA_ALLOC_CONF" || name == "PYTORCH_ALLOC_CONF") &&
         value.find("expandable_segments:True") != std::string_view::npos;
}

std::vector<std::string> blank_separated(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : text + " ") {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  return words;
}

// What of the script was not read, as notes.
void script_notes(const ShellScript& script, MegatronArgs& args) {
  if (!script.not_run.empty()) {
    constexpr std::size_t kShown = 6;
    std::vector<std::string> shown;
    for (std::size_t i = 0; i < std::min(kShown, script.not_run.size()); ++i) {
      shown.push_back(shown_input(script.not_run[i]));
    }
    args.not_modelled.push_back(
        fmt::format("shell: left as written (shardplan runs no command): {}{}",
                    fmt::join(shown, ", "), script.not_run.size() > kShown ? ", ..." : ""));
  }
  for (const std::string& entry : script.not_read.entries) {
    args.not_modelled.push_back("shell: not read: " + entry);
  }
  if (script.not_read.more > 0) {
    args.not_modelled.push_back(
        fmt::format("shell: not read: {} more part(s)", script.not_read.more));
  }
}

}  // namespace

MegatronArgs parse_megatron_script(std::string_view text, const std::string& label) {
  const ShellScript script = read_shell_script(text, label);
  std::vector<std::vector<std::string>> commands;
  bool expandable = false;
  for (const ShellCommand& command : script.commands) {
    for (const auto& [name, value] : command.environment) {
      expandable = expandable || expandable_segments(name, value);
    }
    const std::string& name = command.words.front();
    if (name != "echo" && name != "printf") commands.push_back(command.words);
  }
  for (const auto& [name, variable] : script.variables.in_order()) {
    expandable = expandable || (variable->exported && !variable->values.empty() &&
                                expandable_segments(name, variable->values.front()));
  }
  if (std::none_of(commands.begin(), commands.end(), has_flag)) {
    for (const auto& [name, variable] : script.variables.in_order()) {
      if (variable->referenced || variable->values.empty()) continue;
      std::vector<std::string> words =
          variable->array ? variable->values : blank_separated(variable->values.front());
      if (has_flag(words)) commands.push_back(std::move(words));
    }
  }
  if (std::none_of(commands.begin(), commands.end(), has_flag)) {
    throw InputError(
        label, "",
        fmt::format("holds no Megatron-LM arguments: no command{} passes a --flag{}",
                    script.commands.empty() ? " (nothing but assignments and comments)" : "",
                    script.not_read.entries.empty()
                        ? ""
                        : "; not read: " + script.not_read.entries.front()));
  }
  MegatronArgs args = parse_megatron_words(commands, label);
  args.expandable_segments = expandable;
  script_notes(script, args);
  return args;
}

}  // namespace shardplan
