// What every reader gets from the user's files: read_text_file (directories, devices and
// oversized files refused with the limit named), JSON with a key given twice refused with
// its path, and messages that never echo raw bytes or megabytes of a value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "models/error.h"
#include "models/json_reader.h"

namespace shardplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("shardplan_input_" + std::to_string(::getpid()) + name);
}

TEST(ReadTextFile, ReadsAFileWhole) {
  const fs::path path = temp_path("whole.txt");
  std::string text(200'000, 'x');
  text += "\nend";
  std::ofstream(path, std::ios::binary) << text;
  EXPECT_EQ(read_text_file(path.string()), text);
  fs::remove(path);
}

TEST(ReadTextFile, ADirectoryIsNotReadAsAnEmptyFile) {
  EXPECT_THAT(error_of([] { read_text_file(fs::temp_directory_path().string()); }),
              HasSubstr("is a directory"));
}

TEST(ReadTextFile, AMissingFileSaysSo) {
  EXPECT_THAT(error_of([] { read_text_file("/nonexistent/shardplan.json"); }),
              HasSubstr("cannot open file: No such file or directory"));
}

TEST(ReadTextFile, AFileOverTheLimitIsRefusedBeforeItIsRead) {
  const fs::path path = temp_path("big.txt");
  std::ofstream(path, std::ios::binary) << std::string(5000, 'x');
  const std::string message = error_of([&] { read_text_file(path.string(), 4096); });
  EXPECT_THAT(message, HasSubstr("the file (5000 bytes) is larger than"));
  EXPECT_THAT(message, HasSubstr("Limits"));
  EXPECT_EQ(read_text_file(path.string(), 5000).size(), 5000u);  // at the limit: read
  fs::remove(path);
}

// /dev/zero never ends: it is read up to the limit and refused, not until memory runs out.
TEST(ReadTextFile, AnEndlessDeviceStopsAtTheLimit) {
  const std::string message = error_of([] { read_text_file("/dev/zero", 1 << 20); });
  EXPECT_THAT(message, HasSubstr("/dev/zero: the input is larger than the 1 MiB"));
}

// Opening a FIFO waits for a writer: one with none must not hang the reader.
TEST(ReadTextFile, AFifoNoOneWritesToReadsAsEmpty) {
  const fs::path fifo = temp_path("fifo");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(read_text_file(fifo.string()), "");
  fs::remove(fifo);
}

TEST(ReadTextFile, AnEmptyDeviceReadsAsEmpty) {
  EXPECT_EQ(read_text_file("/dev/null"), "");
}

TEST(ParseJson, AKeyGivenTwiceIsRefusedWithItsPath) {
  const std::string message = error_of([] {
    parse_json_text(R"({"ops": [{"id": 0}, {"id": 1, "bytes": 2, "bytes": 3}]})", "plan.json");
  });
  EXPECT_EQ(message,
            "plan.json: /ops/1: the key 'bytes' appears twice in this object; give "
            "each key once");
  EXPECT_THAT(error_of([] { parse_json_text(R"({"a": 1, "a": 1})", "c.json"); }),
              HasSubstr("c.json: /: the key 'a' appears twice"));
}

TEST(ParseJson, ADuplicateInALargeObjectIsFound) {
  std::string text = "{";
  for (int i = 0; i < 1000; ++i)
    text += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  text += "\"k999\": 0}";
  EXPECT_THAT(error_of([&] { parse_json_text(text, "big.json"); }),
              HasSubstr("the key 'k999' appears twice"));
}

TEST(ParseJson, TheSameKeyInSiblingObjectsIsFine) {
  const nlohmann::json json = parse_json_text(
      R"({"a": {"x": 1, "y": [1, {"x": 2}]}, "b": {"x": 3}, "c": [{"x": 4}, {"x": 5}]})", "ok");
  EXPECT_EQ(json["c"][1]["x"], 5);
  EXPECT_EQ(json["a"]["y"][1]["x"], 2);
}

TEST(ParseJson, DeepNestingIsRefusedBeforeAnythingRecurses) {
  EXPECT_TRUE(
      parse_json_text(std::string(1000, '[') + std::string(1000, ']'), "ok.json").is_array());
  const std::string text = std::string(100'000, '[') + std::string(100'000, ']');
  EXPECT_EQ(error_of([&] { parse_json_text(text, "deep.json"); }),
            "deep.json: values nested more than 1000 levels deep; no shardplan input nests that "
            "deep (copying such a value would recurse as deep)");
}

TEST(ParseJson, SyntaxErrorsStillGiveLineAndColumn) {
  EXPECT_THAT(error_of([] { parse_json_text("{\n  \"a\": 1,\n  oops\n}", "f.json"); }),
              HasSubstr("f.json: invalid JSON at line 3, column 3"));
}

TEST(ParseJson, SyntaxErrorsDoNotEchoTheInput) {
  const std::string token(100'000, 'x');
  const std::string message =
      error_of([&] { parse_json_text("{\"a\": " + token + "}", "f.json"); });
  EXPECT_THAT(message, HasSubstr("f.json: invalid JSON at line 1, column"));
  EXPECT_THAT(message, Not(HasSubstr("xxxxxxxxxx")));
  EXPECT_THAT(message, Not(HasSubstr("last read")));
  const std::string overflow =
      error_of([] { parse_json_text("{\"a\": 1" + std::string(5000, '0') + "}", "g.json"); });
  EXPECT_THAT(overflow, HasSubstr("g.json: invalid JSON: a number past the range of a double: "
                                  "'100000000000000000000000000000000000000000000000000000000000…' "
                                  "(5001 bytes)"));
}

TEST(QuoteInput, ControlBytesAndBadUtf8AreEscaped) {
  EXPECT_EQ(quote_input("plain"), "'plain'");
  EXPECT_EQ(quote_input(std::string("a\0b\r\n\t\x7f", 7)), "'a\\x00b\\r\\n\\t\\x7F'");
  EXPECT_EQ(quote_input("\xEF\xBB\xBFnum_layers"), "'\\u{FEFF}num_layers'");
  EXPECT_EQ(quote_input("caf\xC3\xA9"), "'caf\xC3\xA9'");  // valid UTF-8 kept
  EXPECT_EQ(quote_input("a\xC2\x84\xC2\x9F\xC2\xA0"),
            "'a\\u{0084}\\u{009F}\xC2\xA0'");  // C1 controls
  EXPECT_EQ(quote_input("\xC3(\xFF"), "'\\xC3(\\xFF'");
  EXPECT_EQ(quote_input("\xED\xA0\x80"), "'\\xED\\xA0\\x80'");  // a surrogate
  EXPECT_EQ(quote_input("\xE0\x80\xAF"), "'\\xE0\\x80\\xAF'");  // overlong
}

TEST(QuoteInput, ALongValueIsCutWithItsSize) {
  const std::string value(3'000'000, 'x');
  EXPECT_EQ(quote_input(value, 5), "'xxxxx…' (3.0 MB)");
  EXPECT_EQ(quote_input("12345", 5), "'12345'");
}

TEST(PrintableName, ALongNameKeepsItsTwoEnds) {
  EXPECT_EQ(printable_name("/ops/3/bytes"), "/ops/3/bytes");
  EXPECT_EQ(printable_name("a\nb"), "a\\nb");
  const std::string path = "/ops/35/" + std::string(4000, 't') + "/bytes";
  const std::string shown = printable_name(path, 40);
  EXPECT_EQ(shown, "/ops/35/tttttttttttt…(4014 bytes in all)…tttttttttttttt/bytes");
  // A multi-byte character is never cut in two.
  const std::string accents = std::string(3, 'x') + [] {
    std::string e;
    for (int i = 0; i < 100; ++i) e += "\xC3\xA9";
    return e;
  }();
  const std::string cut = printable_name(accents, 21);
  EXPECT_EQ(quote_input(cut, 1000).find("\\x"), std::string::npos) << cut;
}

TEST(InputErrorMessage, IsPrintableAndBounded) {
  const InputError error("f\x1b[31m.json", "/a", std::string(100'000, 'y') + "\x01");
  const std::string message = error.what();
  EXPECT_THAT(message, Not(HasSubstr("\x1b")));
  EXPECT_THAT(message, HasSubstr("f\\x1B[31m.json: /a: yyy"));
  EXPECT_LT(message.size(), 1200u);
  EXPECT_THAT(message, HasSubstr("more left out)"));
  // The parts are the printable ones what() is built from.
  EXPECT_EQ(error.file(), "f\\x1B[31m.json");
  EXPECT_EQ(message, error.file() + ": " + error.field() + ": " + error.reason());
  EXPECT_EQ(InputError("", "", "two\nlines").what(), std::string("two\nlines"));
}

}  // namespace
}  // namespace shardplan
