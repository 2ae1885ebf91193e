#include "models/module_pattern.h"

namespace shardplan {

bool module_name_matches(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return name.empty();
  if (pattern.starts_with("**")) {
    for (std::size_t i = 0; i <= name.size(); ++i) {
      if (module_name_matches(pattern.substr(2), name.substr(i))) return true;
    }
    return false;
  }
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= name.size(); ++i) {
      if (module_name_matches(pattern.substr(1), name.substr(i))) return true;
      if (i < name.size() && name[i] == '.') break;
    }
    return false;
  }
  return !name.empty() && pattern[0] == name[0] &&
         module_name_matches(pattern.substr(1), name.substr(1));
}

namespace {

void collect(const Module& module, const std::vector<std::string>& patterns,
             std::vector<const Module*>& out) {
  for (const std::string& pattern : patterns) {
    if (!module.name.empty() && module_name_matches(pattern, module.name)) {
      out.push_back(&module);
      return;
    }
  }
  for (const Module& child : module.children) collect(child, patterns, out);
}

}  // namespace

std::vector<const Module*> match_modules(const Module& root,
                                         const std::vector<std::string>& patterns) {
  std::vector<const Module*> out;
  collect(root, patterns, out);
  return out;
}

}  // namespace shardplan
