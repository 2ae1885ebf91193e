#include "models/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string_view>

#include "models/error.h"

namespace shardplan {
namespace {

namespace fs = std::filesystem;

// Every temporary file ends so, after ".<target name>.<pid>-<n>": a later write to the
// same target can tell its own leftovers from anything else in the folder.
constexpr std::string_view kTemporarySuffix = ".shardplan.tmp";

[[noreturn]] void fail(const std::string& path, std::string_view what, int error) {
  throw InputError(path, "",
                   "cannot write the file (" + std::string(what) + "): " + std::strerror(error));
}

// Removes the temporary file unless released: every early exit cleans up.
class TemporaryFile {
 public:
  TemporaryFile() = default;
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void own(std::string path, int fd) {
    path_ = std::move(path);
    fd_ = fd;
  }
  int fd() const { return fd_; }
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
  int fd_ = -1;
};

void write_all(int fd, std::string_view text, const std::string& path) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      fail(path, "write", errno);
    }
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Follows a chain of symbolic links to the path it ends at (which may not exist yet: a
// link may name a file still to be written), as open() would, at most 40 links deep
// (Linux's MAXSYMLINKS). `through_proc` tells whether a hop passed through /proc
// (/dev/stdout → /proc/self/fd/1); `descriptor`, which of this process's own open files a
// hop named (/proc/self/fd/N, /dev/fd/N).
fs::path resolve_links(const std::string& path, bool* through_proc = nullptr,
                       std::optional<int>* descriptor = nullptr) {
  fs::path current(path);
  const std::string own_fd = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (int hops = 0; hops < 40; ++hops) {
    const std::string hop = current.string();
    if (through_proc != nullptr && hop.starts_with("/proc/")) *through_proc = true;
    for (const std::string& folder :
         {std::string("/proc/self/fd/"), std::string("/dev/fd/"), own_fd}) {
      int fd = -1;
      const char* digits = hop.c_str() + folder.size();
      if (descriptor != nullptr && hop.starts_with(folder) &&
          std::from_chars(digits, hop.c_str() + hop.size(), fd).ptr == hop.c_str() + hop.size()) {
        *descriptor = fd;
      }
    }
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    std::error_code error;
    const fs::path target = fs::read_symlink(current, error);
    if (error) fail(path, "reading the symbolic link", error.value());
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  fail(path, "following symbolic links", ELOOP);
}

// The pid in a temporary file name ".<name>.<pid>-<n>.shardplan.tmp" of `prefix`.
std::optional<pid_t> temporary_owner(std::string_view entry, std::string_view prefix) {
  if (!entry.starts_with(prefix) || !entry.ends_with(kTemporarySuffix)) return std::nullopt;
  entry.remove_prefix(prefix.size());
  entry.remove_suffix(kTemporarySuffix.size());
  const std::size_t dash = entry.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(entry.data(), entry.data() + dash, pid);
  if (error != std::errc() || end != entry.data() + dash || pid <= 0) return std::nullopt;
  return pid;
}

// Removes the temporary files an earlier write to this target left when it was killed
// (its process is gone). A live process's file is its write in progress: left alone.
void remove_stale_temporaries(const fs::path& directory, const std::string& prefix) {
  DIR* folder = ::opendir(directory.c_str());
  if (folder == nullptr) return;  // creating our own temporary file will say why
  while (const dirent* entry = ::readdir(folder)) {
    const std::optional<pid_t> owner = temporary_owner(entry->d_name, prefix);
    if (owner && ::kill(*owner, 0) != 0 && errno == ESRCH) {
      ::unlink((directory / entry->d_name).c_str());
    }
  }
  ::closedir(folder);
}

void replace_regular_file(const std::string& path, const fs::path& target,
                          std::optional<mode_t> existing_mode, const std::string& text) {
  fs::path directory = target.parent_path();
  if (directory.empty()) directory = ".";
  // A name near the file system's limit (255 bytes) leaves no room for the temporary's
  // additions: its first 128 bytes name the temporary instead.
  constexpr std::size_t kNameInTemporary = 128;
  const std::string prefix = "." + target.filename().string().substr(0, kNameInTemporary) + ".";
  remove_stale_temporaries(directory, prefix);

  // The pid names the writer; the counter keeps two writes of one process (threads of the
  // Python module) apart.
  static std::atomic<unsigned> counter{0};
  TemporaryFile temporary;
  for (int attempt = 0; temporary.fd() < 0; ++attempt) {
    const std::string name =
        (directory / (prefix + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
                      std::string(kTemporarySuffix)))
            .string();
    // 0666 less the umask, as a plain open gives: the kernel applies the umask (reading
    // it with umask() would race with other threads).
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      temporary.own(name, fd);
    } else if (errno != EEXIST || attempt > 100) {
      fail(path, "no temporary file beside it", errno);
    }
  }
  write_all(temporary.fd(), text, path);
  if (existing_mode && ::fchmod(temporary.fd(), *existing_mode & 07777) != 0) {
    fail(path, "file mode", errno);
  }
  // On disk before the rename, so a crash of the machine cannot leave an empty target.
  if (::fsync(temporary.fd()) != 0) fail(path, "fsync", errno);
  if (temporary.close() != 0) fail(path, "close", errno);
  if (::rename(temporary.path().c_str(), target.c_str()) != 0) fail(path, "rename over it", errno);
  temporary.release();
}

// A device or FIFO is written into as `>` would: replacing it would destroy it. A regular
// file reached through another process's /proc/<pid>/fd is appended to, never emptied.
void write_into(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) fail(path, "open", errno);
  TemporaryFile closer;  // closes the descriptor; there is no file to remove
  closer.own("", fd);
  write_all(fd, text, path);
  if (closer.close() != 0) fail(path, "close", errno);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  if (path.empty() || fs::path(path).filename().empty()) {
    throw InputError(path, "", "not a file name");
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) fail(path, "stat", errno);
    replace_regular_file(path, resolve_links(path), std::nullopt, text);
    return;
  }
  bool through_proc = false;
  std::optional<int> descriptor;
  const fs::path target = resolve_links(path, &through_proc, &descriptor);
  // /dev/stdout and /proc/self/fd/N name a file this process has open, not a path to
  // replace: the text goes through that descriptor at its offset, after what the process
  // already printed there (`-o /dev/stdout >> log` appends; `> out.json` gets the text in
  // order with the rest of the output).
  if (descriptor) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    write_all(*descriptor, text, path);
    return;
  }
  if (S_ISREG(info.st_mode)) {
    if (through_proc) {
      write_into(path, text);
    } else {
      replace_regular_file(path, target, info.st_mode, text);
    }
  } else if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
    write_into(path, text);
  } else if (S_ISDIR(info.st_mode)) {
    throw InputError(path, "", "is a directory; give a file name to write");
  } else {
    throw InputError(path, "",
                     S_ISBLK(info.st_mode)
                         ? "is a block device; shardplan writes only files, character "
                           "devices and pipes"
                         : "is a socket; shardplan writes only files, character devices "
                           "and pipes");
  }
}

void check_distinct_outputs(const std::vector<OutputPath>& outputs) {
  std::vector<std::pair<const OutputPath*, fs::path>> files;
  for (const OutputPath& output : outputs) {
    if (output.path.empty()) continue;
    struct stat info {};
    const bool exists = ::stat(output.path.c_str(), &info) == 0;
    const fs::path target = resolve_links(output.path);
    if (exists && (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode))) continue;
    std::error_code error;
    fs::path absolute = fs::absolute(target, error).lexically_normal();
    // The folder may itself be reached through a link: compare where it really is.
    if (const fs::path folder = fs::canonical(absolute.parent_path(), error); !error) {
      absolute = folder / absolute.filename();
    }
    for (const auto& [earlier, earlier_path] : files) {
      if (earlier_path == absolute) {
        throw InputError(output.flag, "",
                         "writes to the same file as " + earlier->flag + " (" + output.path +
                             "); give each output its own file");
      }
    }
    files.emplace_back(&output, absolute);
  }
}

}  // namespace shardplan
