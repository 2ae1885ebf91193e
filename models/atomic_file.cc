#include "models/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include "models/error.h"

namespace shardplan {
namespace {

// Removes the temporary file unless released: every early exit cleans up.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  int& fd() { return fd_; }
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
  int fd_ = -1;
};

[[noreturn]] void fail(const std::string& path, std::string_view what, int error) {
  throw InputError(path, "",
                   "cannot write the file (" + std::string(what) + "): " + std::strerror(error));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::filesystem::path target(path);
  if (target.filename().empty()) throw InputError(path, "", "not a file name");
  std::filesystem::path directory = target.parent_path();
  if (directory.empty()) directory = ".";
  std::string pattern = (directory / ("." + target.filename().string() + ".XXXXXX.tmp")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkstemps(name.data(), /*suffixlen=*/4);
  if (fd < 0) fail(path, "no temporary file beside it", errno);
  TemporaryFile temporary(std::string(name.data()));
  temporary.fd() = fd;

  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t written = ::write(fd, rest.data(), rest.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      fail(path, "write", errno);
    }
    rest.remove_prefix(static_cast<std::size_t>(written));
  }
  // mkstemp makes the file private (0600); a plain open would give 0666 less the umask.
  const mode_t umask_bits = ::umask(0);
  ::umask(umask_bits);
  if (::fchmod(fd, 0666 & ~umask_bits) != 0) fail(path, "file mode", errno);
  // On disk before the rename, so a crash of the machine cannot leave an empty target.
  if (::fsync(fd) != 0) fail(path, "fsync", errno);
  const int closing = ::close(fd);
  temporary.fd() = -1;
  if (closing != 0) fail(path, "close", errno);
  if (::rename(temporary.path().c_str(), path.c_str()) != 0) fail(path, "rename over it", errno);
  temporary.release();
}

}  // namespace shardplan
