#pragma once

#include <string>
#include <vector>

namespace shardplan {

// Writes `text` to `path` so that the path only ever holds its old content or all of the
// new, and so that nothing but the file the user meant is touched:
// - a regular file (or a path that does not exist yet) is replaced atomically: the text
//   goes to a temporary file beside it (".NAME.<pid>-<n>.shardplan.tmp"), is flushed to
//   disk, given the mode a plain open would give (0666 less the umask; an existing file's
//   own mode is kept), and renamed over the target. A process killed while writing leaves
//   the target as it was; its temporary file is removed by the next write to that path;
// - a symbolic link is followed to the file it names, which is replaced as above (the
//   link stays a link);
// - a character device or FIFO (/dev/null, a named pipe) is written into, never replaced;
// - a file this process has open (/dev/stdout, /proc/self/fd/N) is written through that
//   descriptor, at its offset, after what was printed there before (so `>> log` appends);
// - a directory, block device or socket is refused.
// Throws InputError naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

// One output of a command: the flag that named it and its path (empty = not asked for).
struct OutputPath {
  std::string flag;
  std::string path;
};
// Throws InputError when two outputs would land in the same file (the same path, or links
// to one file), which would leave only the last one written. Character devices and FIFOs
// (/dev/null for both) may be shared.
void check_distinct_outputs(const std::vector<OutputPath>& outputs);

}  // namespace shardplan
