#pragma once

#include <string>

namespace shardplan {

// A whole file as text; a missing or unreadable file is an InputError naming it.
std::string read_text_file(const std::string& path);

}  // namespace shardplan
