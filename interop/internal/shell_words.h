#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// The words a POSIX shell would pass for `text`, without expanding anything: quotes
// ('...', "...", \x) group, `#` at a word's start comments to the end of the line, a
// backslash-newline joins lines. `label` names the input in errors (an unclosed quote).
std::vector<std::string> shell_words(std::string_view text, const std::string& label);

}  // namespace shardplan
