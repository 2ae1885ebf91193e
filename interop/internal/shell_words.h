#pragma once

// The tokens of a bash script, as bash's own parser splits them: words (their quotes,
// `$(...)`, `${...}` and backquotes kept whole, for shell_expand to read), the operators
// that separate commands, and the `NAME=(` that opens an array. Comments, backslash-newline
// continuations and the bodies of here-documents (`cat <<EOF ... EOF`) are dropped here.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

enum class ShellTokenKind {
  word,        // raw source text of one word (quotes and expansions as written)
  array_open,  // `NAME=(` or `NAME+=(`: text is NAME
  op,          // ; ;; ;& ;;& & && | |& || ( ) and redirections (> >> < <& >& &> <<< 2>...)
  newline,
  end,
};

struct ShellToken {
  ShellTokenKind kind = ShellTokenKind::end;
  std::string text;
  bool append = false;    // array_open: `NAME+=(`
  int line = 0;           // 1-based, where the token starts
  std::size_t begin = 0;  // source offsets, for quoting a piece of the script in a note
  std::size_t end = 0;
};

// Quotes, substitutions and `${...}` nest at most this deep inside one word; compound
// commands (if, while, { }, ( )) at most this deep inside each other. Real scripts nest a
// few levels; the bound keeps a hostile input from exhausting the stack.
inline constexpr int kMaxShellNesting = 64;

// Reads tokens one at a time, so a long script never holds all its tokens at once.
class ShellLexer {
 public:
  // `label` names the input in errors ("line 3: unclosed \" quote").
  ShellLexer(std::string_view text, std::string label);

  const ShellToken& peek();
  ShellToken next();
  std::string_view source() const { return text_; }
  const std::string& label() const { return label_; }

 private:
  ShellToken lex();
  ShellToken lex_word();
  ShellToken lex_operator();
  void skip_heredoc_bodies();
  void scan_single_quote(std::string& raw);
  [[noreturn]] void fail(int line, const std::string& reason) const;

  std::string_view text_;
  std::string label_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool have_peeked_ = false;
  ShellToken peeked_;
  // Here-documents whose bodies start after the next newline: delimiter, and whether
  // leading tabs are stripped (`<<-`).
  std::vector<std::pair<std::string, bool>> heredocs_;
  int expect_heredoc_word_ = 0;  // 1: `<<`, 2: `<<-` seen, its delimiter is the next word
};

// Whether `raw` is an unquoted reserved word or operator-like word such as `then`.
bool is_shell_word(const ShellToken& token, std::string_view text);

// The raw text with quotes removed and nothing expanded (a here-document's delimiter).
std::string shell_unquoted(std::string_view raw);

}  // namespace shardplan
