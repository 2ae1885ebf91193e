// A script's tokens as bash splits them: words keep their quotes and substitutions whole;
// comments, continuations and here-document bodies are dropped.
#include "interop/internal/shell_words.h"

#include <gtest/gtest.h>

#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

std::vector<std::string> tokens(std::string_view text) {
  ShellLexer lexer(text, "script");
  std::vector<std::string> out;
  for (ShellToken t = lexer.next(); t.kind != ShellTokenKind::end; t = lexer.next()) {
    switch (t.kind) {
      case ShellTokenKind::newline:
        out.push_back("NL");
        break;
      case ShellTokenKind::array_open:
        out.push_back((t.append ? "ARRAY+ " : "ARRAY ") + t.text);
        break;
      case ShellTokenKind::op:
        out.push_back("OP " + t.text);
        break;
      default:
        out.push_back(t.text);
    }
  }
  return out;
}

using Tokens = std::vector<std::string>;

TEST(ShellWords, WordsKeepQuotesAndSubstitutionsWhole) {
  EXPECT_EQ(tokens("GPT_ARGS=\"--num-layers 24 \\\n  --hidden-size 1024\" # a comment\n"),
            (Tokens{"GPT_ARGS=\"--num-layers 24   --hidden-size 1024\"", "NL"}));
  EXPECT_EQ(
      tokens("mkdir -p \"$(dirname \"$P\")\"; x=${1:-\"a b\"} y='it''s'"),
      (Tokens{"mkdir", "-p", "\"$(dirname \"$P\")\"", "OP ;", "x=${1:-\"a b\"}", "y='it''s'"}));
  EXPECT_EQ(tokens("N=$(( (A + B) / 2 )) `date +%s`"),
            (Tokens{"N=$(( (A + B) / 2 ))", "`date +%s`"}));
}

TEST(ShellWords, OperatorsRedirectionsAndArrays) {
  EXPECT_EQ(tokens("A=(\n --x 1 # one\n) B+=( y )"),
            (Tokens{"ARRAY A", "NL", "--x", "1", "NL", "OP )", "ARRAY+ B", "y", "OP )"}));
  EXPECT_EQ(tokens("a && b || c | tee log 2>&1 >>out;;"),
            (Tokens{"a", "OP &&", "b", "OP ||", "c", "OP |", "tee", "log", "OP 2>&", "1", "OP >>",
                    "out", "OP ;;"}));
  // `NAME=(` opens an array wherever it stands (after a command's name bash refuses it; the
  // reader ignores it there).
  EXPECT_EQ(tokens("echo a=(b)"), (Tokens{"echo", "ARRAY a", "b", "OP )"}));
}

TEST(ShellWords, HereDocumentBodiesAreNotScript) {
  EXPECT_EQ(tokens("cat <<EOT > $CFG\n{ \"it's\": \"$X\" }\nEOT\necho done\n"),
            (Tokens{"cat", "OP <<", "EOT", "OP >", "$CFG", "NL", "echo", "done", "NL"}));
  EXPECT_EQ(tokens("cat <<-'END'\n\tbody (\n\tEND\nnext"),
            (Tokens{"cat", "OP <<-", "'END'", "NL", "next"}));
  EXPECT_EQ(tokens("cat <<<\"$X\"\nnext"), (Tokens{"cat", "OP <<<", "\"$X\"", "NL", "next"}));
}

TEST(ShellWords, ErrorsNameTheLine) {
  using testing::expect_input_error;
  expect_input_error([] { tokens("a\nb 'open\nmore"); }, "line 2", "unclosed ' quote", "script");
  expect_input_error([] { tokens("x=\"$(echo"); }, "line 1", "unclosed $(");
  expect_input_error([] { tokens("x=${A"); }, "line 1", "unclosed ${");
  expect_input_error([] { tokens("x=\"abc"); }, "line 1", "unclosed \" quote");
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "$(";
  expect_input_error([&] { tokens(deep); }, "line 1", "nested more than 64 deep");
}

TEST(ShellWords, UnquotedTextOfADelimiter) {
  EXPECT_EQ(shell_unquoted("'EOF'"), "EOF");
  EXPECT_EQ(shell_unquoted("\"E\\\"F\""), "E\"F");
  EXPECT_EQ(shell_unquoted("E\\OF"), "EOF");
}

}  // namespace
}  // namespace shardplan
