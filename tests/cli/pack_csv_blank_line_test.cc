// End-to-end: `shardplan pack` on a MiniMalloc CSV with empty lines. MiniMalloc stops
// reading at the first empty line; rows after one are refused by name, not dropped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

TEST(PackCsvBlankLine, RowsAfterAnEmptyLineAreAnErrorNamingThem) {
  // Rows 5 and 6 live alongside rows 2 and 3: packed without them the pool would be 8
  // bytes where the program needs 16.
  const std::string input = write_temp_file(
      "blank_middle.csv", "id,lower,upper,size\na,0,4,4\nb,0,4,4\n\nc,0,4,4\nd,0,4,4\n");
  const std::string out = write_temp_file("blank_middle.out.csv", "");
  std::filesystem::remove(out);
  const CommandResult r =
      run_shardplan({"pack", "--input", input, "--alignment", "1", "-o", out, "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("shardplan: error: " + input +
                               ": line 4: empty line before 2 more rows (lines 5-6)"));
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
}

TEST(PackCsvBlankLine, EmptyLinesAtTheEndAreHarmless) {
  const std::string input =
      write_temp_file("blank_end.csv", "id,lower,upper,size\na,0,4,4\nb,0,4,4\n\n\r\n  \n");
  const CommandResult r = run_shardplan({"pack", "--input", input, "--alignment", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["buffers"], 2);
  EXPECT_EQ(j["height"], 8);
}

}  // namespace
}  // namespace shardplan::testing
