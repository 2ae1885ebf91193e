#include "models/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "models/embedded_files.h"
#include "models/error.h"
#include "models/explicit_model.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/suggest.h"
#include "models/transformer_builder.h"

namespace shardplan {

std::vector<std::string> model_zoo_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : model_zoo_files()) names.emplace_back(f.name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

ModelSpec build_model(const JsonReader& reader) {
  const std::string family = reader.string("family");
  if (family == "transformer" || family == "moe") {
    const bool moe = family == "moe";
    const TransformerArch arch = parse_transformer_arch(reader, moe);
    return build_transformer(arch, reader.string("name"), reader.string_or("source", ""));
  }
  if (family == "explicit") return parse_explicit_model(reader);
  const std::vector<std::string> valid = {"transformer", "moe", "explicit"};
  reader.fail("family", unknown_name_message("model family", family, valid));
}

}  // namespace

ModelSpec model_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader reader(json, label);
  ModelSpec model = build_model(reader);
  // Every later count (bytes of ZeRO state, buffers, FLOPs) is bounded by this one.
  if (!parameter_count_within(model.root, limits::kMaxModelParameters)) {
    reader.fail(model.family == "explicit" ? "root" : "",
                fmt::format("{} more than {} (2^47) parameters, the most shardplan plans for "
                            "(the largest published model has 1.6e12)",
                            model.family == "explicit"
                                ? "the parameter shapes add up to"
                                : "hidden_size, ffn_hidden_size, num_layers, vocab_size and the "
                                  "experts give",
                            limits::kMaxModelParameters));
  }
  return model;
}

ModelSpec load_model(const std::string& name_or_file) {
  for (const EmbeddedFile& f : model_zoo_files()) {
    if (f.name == name_or_file) {
      const std::string label = fmt::format("models/zoo/{}.json", f.name);
      return model_from_json(parse_json_text(f.text, label), label);
    }
  }
  const bool looks_like_path =
      name_or_file.find('/') != std::string::npos || name_or_file.ends_with(".json");
  std::error_code missing;  // a name too long for a path is no file, not an exception
  if (looks_like_path || std::filesystem::exists(name_or_file, missing)) {
    return model_from_json(read_json_file(name_or_file), name_or_file);
  }
  throw InputError("", "--model",
                   unknown_name_message("model", name_or_file, model_zoo_names()) +
                       "; or give a path to a model JSON file");
}

}  // namespace shardplan
