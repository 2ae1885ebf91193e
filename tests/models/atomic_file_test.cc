// Where write_file_atomically writes: a regular file is replaced whole, a link's target is
// replaced and the link kept, a device or FIFO is written into and never replaced, a
// directory is refused, and a killed writer's temporary file is cleaned by the next write.
#include "models/atomic_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "models/error.h"

namespace shardplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_plain(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh folder per test, removed after it.
class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("shardplan_atomic_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }
  fs::path at(const std::string& name) const { return folder_ / name; }
  // The names in the folder, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // A character device of our own: the same device numbers as /dev/null or /dev/full.
  // Needs CAP_MKNOD (root, as the test suite and CI run); skipped without it.
  bool make_device(const fs::path& path, unsigned major_number, unsigned minor_number) {
    return ::mknod(path.c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)) == 0;
  }

  fs::path folder_;
};

TEST_F(AtomicFile, ReplacesARegularFileAndKeepsItsMode) {
  write_plain(at("out.json"), "old");
  ::chmod(at("out.json").c_str(), 0640);
  write_file_atomically(at("out.json").string(), "new");
  EXPECT_EQ(read_file(at("out.json")), "new");
  struct stat info {};
  ASSERT_EQ(::stat(at("out.json").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
  EXPECT_EQ(entries(), std::vector<std::string>{"out.json"});  // no temporary left
}

TEST_F(AtomicFile, CreatesAMissingFile) {
  write_file_atomically(at("new.json").string(), "text");
  EXPECT_EQ(read_file(at("new.json")), "text");
}

TEST_F(AtomicFile, FollowsASymbolicLinkAndKeepsTheLink) {
  fs::create_directories(at("real"));
  write_plain(at("real/target.json"), "old");
  fs::create_symlink("real/target.json", at("link.json"));
  fs::create_symlink("link.json", at("link_to_link.json"));
  write_file_atomically(at("link_to_link.json").string(), "new");
  EXPECT_TRUE(fs::is_symlink(at("link.json")));
  EXPECT_TRUE(fs::is_symlink(at("link_to_link.json")));
  EXPECT_EQ(read_file(at("real/target.json")), "new");
  EXPECT_EQ(fs::read_symlink(at("link.json")), "real/target.json");
}

TEST_F(AtomicFile, ADanglingLinkCreatesTheFileItNames) {
  fs::create_symlink("later.json", at("link.json"));
  write_file_atomically(at("link.json").string(), "text");
  EXPECT_TRUE(fs::is_symlink(at("link.json")));
  EXPECT_EQ(read_file(at("later.json")), "text");
}

TEST_F(AtomicFile, ALinkLoopIsAnError) {
  fs::create_symlink("b", at("a"));
  fs::create_symlink("a", at("b"));
  try {
    write_file_atomically(at("a").string(), "text");
    FAIL() << "a link loop was written";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("symbolic links"));
  }
}

TEST_F(AtomicFile, WritesIntoANullDeviceWithoutReplacingIt) {
  if (!make_device(at("null"), 1, 3)) GTEST_SKIP() << "mknod needs CAP_MKNOD";
  write_file_atomically(at("null").string(), "discarded");
  struct stat info {};
  ASSERT_EQ(::lstat(at("null").c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "the device node was replaced";
  EXPECT_EQ(info.st_rdev, makedev(1, 3));
  EXPECT_EQ(entries(), std::vector<std::string>{"null"});
}

TEST_F(AtomicFile, AFullDeviceIsAWriteErrorAndStaysADevice) {
  if (!make_device(at("full"), 1, 7)) GTEST_SKIP() << "mknod needs CAP_MKNOD";
  try {
    write_file_atomically(at("full").string(), "text");
    FAIL() << "/dev/full took the text";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("No space left on device"));
  }
  struct stat info {};
  ASSERT_EQ(::lstat(at("full").c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST_F(AtomicFile, ALinkToADeviceWritesIntoTheDevice) {
  if (!make_device(at("null"), 1, 3)) GTEST_SKIP() << "mknod needs CAP_MKNOD";
  fs::create_symlink("null", at("out"));
  write_file_atomically(at("out").string(), "discarded");
  EXPECT_TRUE(fs::is_symlink(at("out")));
  struct stat info {};
  ASSERT_EQ(::lstat(at("null").c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST_F(AtomicFile, WritesIntoAFifoThatAReaderDrains) {
  ASSERT_EQ(::mkfifo(at("pipe").c_str(), 0600), 0);
  auto reader = std::async(std::launch::async, [&] { return read_file(at("pipe")); });
  write_file_atomically(at("pipe").string(), "through the pipe");
  EXPECT_EQ(reader.get(), "through the pipe");
  struct stat info {};
  ASSERT_EQ(::lstat(at("pipe").c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode)) << "the FIFO was replaced";
}

TEST_F(AtomicFile, RefusesADirectory) {
  fs::create_directories(at("folder"));
  try {
    write_file_atomically(at("folder").string(), "text");
    FAIL() << "a directory was written over";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("is a directory"));
  }
  EXPECT_TRUE(fs::is_directory(at("folder")));
}

TEST_F(AtomicFile, RefusesABlockDevice) {
  // Any block device numbers: it is never opened.
  if (::mknod(at("disk").c_str(), S_IFBLK | 0600, makedev(7, 200)) != 0)
    GTEST_SKIP() << "mknod needs CAP_MKNOD";
  try {
    write_file_atomically(at("disk").string(), "text");
    FAIL() << "a block device was written";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("block device"));
  }
}

// A writer killed mid-write leaves ".out.json.<pid>-<n>.shardplan.tmp"; the next write to
// out.json removes it once that pid is gone, and leaves a live process's file alone.
TEST_F(AtomicFile, TheNextWriteRemovesAKilledWritersTemporaryFile) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // reaped: its pid names no process now
  const std::string stale = ".out.json." + std::to_string(child) + "-0.shardplan.tmp";
  const std::string live = ".out.json." + std::to_string(::getppid()) + "-0.shardplan.tmp";
  const std::string other = ".other.json." + std::to_string(child) + "-0.shardplan.tmp";
  write_plain(at(stale), "half a plan");
  write_plain(at(live), "a write in progress");
  write_plain(at(other), "another target's");
  write_file_atomically(at("out.json").string(), "new");
  EXPECT_EQ(entries(), (std::vector<std::string>{other, live, "out.json"}));
}

TEST_F(AtomicFile, TwoOutputsOnOneFileAreRefused) {
  fs::create_symlink("a.json", at("link.json"));
  EXPECT_NO_THROW(check_distinct_outputs(
      {{"--csv", at("a.json").string()}, {"--report", at("b.html").string()}, {"--x", ""}}));
  try {
    check_distinct_outputs({{"--trace-out", at("a.json").string()},
                            {"--timeline-out", ""},
                            {"--report", (folder_ / "." / "a.json").string()}});
    FAIL() << "one path twice was accepted";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("--report"));
    EXPECT_THAT(error.what(), HasSubstr("same file as --trace-out"));
  }
  EXPECT_THROW(check_distinct_outputs(
                   {{"--csv", at("a.json").string()}, {"--report", at("link.json").string()}}),
               InputError);
}

TEST_F(AtomicFile, OneDeviceMayTakeSeveralOutputs) {
  if (!make_device(at("null"), 1, 3)) GTEST_SKIP() << "mknod needs CAP_MKNOD";
  EXPECT_NO_THROW(check_distinct_outputs(
      {{"--trace-out", at("null").string()}, {"--report", at("null").string()}}));
}

}  // namespace
}  // namespace shardplan
