#pragma once

#include <string_view>

#include "models/embedded_files.h"

namespace shardplan {

// The interop data files compiled in (interop/data/*.json), by stem.
const std::vector<EmbeddedFile>& interop_data_files();
const EmbeddedFile& interop_data_file(std::string_view stem);

}  // namespace shardplan
