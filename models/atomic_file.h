#pragma once

#include <string>

namespace shardplan {

// Writes `text` to `path` so that the path only ever holds its old content or all of the
// new: the text goes to a private temporary file beside it (".NAME.XXXXXX.tmp"), is
// flushed to disk, given the mode a plain open would give (0666 less the umask), and
// renamed over the target. A process killed while writing leaves the target as it was
// (at most a stray temporary file); a failed write removes the temporary file. Throws
// InputError naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace shardplan
