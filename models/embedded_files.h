#pragma once

#include <string_view>
#include <vector>

namespace shardplan {

// A JSON file compiled into the binary (see cmake/embed_files.cmake).
struct EmbeddedFile {
  std::string_view name;    // file stem: "llama3-8b"
  std::string_view origin;  // path at build time, for messages
  std::string_view text;
};

const std::vector<EmbeddedFile>& model_zoo_files();
const std::vector<EmbeddedFile>& cluster_zoo_files();

}  // namespace shardplan
