// The HTML report: self-contained, and rendered by headless Chromium (Debian's
// `chromium`, installed by scripts/install-deps.sh) without errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command, returning its stdout; stderr goes to `err_path`.
std::string shell(const std::string& command, const std::string& err_path, int& status) {
  std::string out;
  FILE* pipe = popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  status = pclose(pipe);
  return out;
}

// Loads `page` in headless Chromium and returns the DOM it built; fails the test if
// Chromium is missing, exits non-zero, or logs a console error or a failed load.
std::string render_in_chromium(const std::string& page) {
  EXPECT_EQ(std::system("command -v chromium > /dev/null"), 0)
      << "headless Chromium is needed for this test: apt-get install chromium "
         "(scripts/install-deps.sh does)";
  const std::string err = write_temp_file("chromium.err", "");
  int status = -1;
  const std::string dom = shell(
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr "
      "--v=0 --dump-dom 'file://" +
          page + "'",
      err, status);
  const std::string log = read_text(err);
  EXPECT_EQ(status, 0) << log;
  EXPECT_THAT(log, Not(HasSubstr("CONSOLE")));
  EXPECT_THAT(log, Not(HasSubstr("Page load failed")));
  return dom;
}

TEST(Report, IsSelfContainedAndRendersInHeadlessChromium) {
  const std::string report = write_temp_file("report.html", "");
  const CommandResult r =
      run_shardplan({"simulate", "--model", "tiny", "--gpus", "4", "--set", "grad_accum=2", "--set",
                     "allocator=pool", "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = read_text(report);
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  // Nothing to fetch: no scripts, stylesheets or images from elsewhere.
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, HasSubstr("Memory over time"));
  EXPECT_THAT(html, HasSubstr("Pool"));
  EXPECT_THAT(html, HasSubstr("Streams"));

  const std::string dom = render_in_chromium(report);
  // Chromium parsed the page: the three charts and the summary are in its DOM.
  std::size_t svgs = 0;
  for (std::size_t at = dom.find("<svg"); at != std::string::npos; at = dom.find("<svg", at + 1))
    ++svgs;
  EXPECT_EQ(svgs, 3u) << dom.substr(0, 2000);
  EXPECT_THAT(dom, HasSubstr("<table>"));
  EXPECT_THAT(dom, HasSubstr("<rect"));
  EXPECT_THAT(dom, HasSubstr("<polygon"));
}

TEST(Report, SweepPageRendersInHeadlessChromium) {
  const std::string report = write_temp_file("sweep_report.html", "");
  const CommandResult r =
      run_shardplan({"sweep", "--model", "tiny", "--gpus", "4", "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dom = render_in_chromium(report);
  EXPECT_THAT(dom, HasSubstr("<svg"));
  EXPECT_THAT(dom, HasSubstr("<circle"));
  EXPECT_THAT(dom, HasSubstr("memory cap"));
  EXPECT_THAT(dom, HasSubstr("<table>"));
}

}  // namespace
}  // namespace shardplan::testing
