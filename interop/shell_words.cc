// A bash script's tokens (bash(1), "DEFINITIONS" and "QUOTING"): words end at a blank or
// one of ; & | < > ( ) outside quotes, `$(...)`, `${...}` and backquotes; a word that is
// `NAME=` or `NAME+=` directly followed by `(` opens an array.
#include "interop/internal/shell_words.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "models/error.h"

namespace shardplan {
namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

bool is_operator_char(char c) {
  return c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')';
}

bool is_name(std::string_view text) {
  if (text.empty() || (std::isalpha(static_cast<unsigned char>(text[0])) == 0 && text[0] != '_')) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

// `NAME=` or `NAME+=`: the start of an array assignment when `(` follows.
bool opens_array(std::string_view raw) {
  if (raw.size() < 2 || raw.back() != '=') return false;
  raw.remove_suffix(1);
  if (raw.back() == '+') raw.remove_suffix(1);
  return is_name(raw);
}

// Operators, longest first so that `;;` is not read as two `;`.
constexpr std::string_view kOperators[] = {";;&", ";;", ";&", ";",   "&&",  "&>>", "&>", "&",
                                           "||",  "|&", "|",  "<<<", "<<-", "<<",  "<&", "<>",
                                           "<",   ">>", ">&", ">|",  ">",   "(",   ")"};

std::string_view closer_name(char closer) {
  switch (closer) {
    case '"':
      return "\" quote";
    case '`':
      return "` (a command substitution)";
    case ')':
      return "$( (a command substitution)";
    default:
      return "${ (a parameter expansion)";
  }
}

}  // namespace

ShellLexer::ShellLexer(std::string_view text, std::string label)
    : text_(text), label_(std::move(label)) {}

void ShellLexer::fail(int line, const std::string& reason) const {
  throw InputError(label_, fmt::format("line {}", line), reason);
}

const ShellToken& ShellLexer::peek() {
  if (!have_peeked_) {
    peeked_ = lex();
    have_peeked_ = true;
  }
  return peeked_;
}

ShellToken ShellLexer::next() {
  if (have_peeked_) {
    have_peeked_ = false;
    return std::move(peeked_);
  }
  return lex();
}

ShellToken ShellLexer::lex() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (is_blank(c)) {
      ++pos_;
    } else if (c == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') {
      pos_ += 2;  // a continuation between words
      ++line_;
    } else if (c == '#') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
  if (pos_ >= text_.size()) return ShellToken{ShellTokenKind::end, "", false, line_, pos_, pos_};
  const char c = text_[pos_];
  if (c == '\n') {
    ShellToken token{ShellTokenKind::newline, "\n", false, line_, pos_, pos_ + 1};
    ++pos_;
    ++line_;
    skip_heredoc_bodies();
    return token;
  }
  // `2>&1`, `2>/dev/null`: digits directly before a redirection name a file descriptor.
  std::size_t digits = pos_;
  while (digits < text_.size() && std::isdigit(static_cast<unsigned char>(text_[digits])) != 0) {
    ++digits;
  }
  if (is_operator_char(c) ||
      (digits > pos_ && digits < text_.size() && (text_[digits] == '<' || text_[digits] == '>'))) {
    return lex_operator();
  }
  ShellToken token = lex_word();
  if (token.kind == ShellTokenKind::word && expect_heredoc_word_ != 0) {
    heredocs_.emplace_back(shell_unquoted(token.text), expect_heredoc_word_ == 2);
    expect_heredoc_word_ = 0;
  }
  return token;
}

ShellToken ShellLexer::lex_operator() {
  ShellToken token{ShellTokenKind::op, "", false, line_, pos_, pos_};
  while (std::isdigit(static_cast<unsigned char>(text_[pos_])) != 0) token.text += text_[pos_++];
  const std::string_view rest = text_.substr(pos_);
  for (std::string_view op : kOperators) {
    if (rest.substr(0, op.size()) == op) {
      token.text += op;
      pos_ += op.size();
      if (op == "<<") expect_heredoc_word_ = 1;
      if (op == "<<-") expect_heredoc_word_ = 2;
      break;
    }
  }
  token.end = pos_;
  return token;
}

// A here-document's body runs from the line after its command to a line holding only
// the delimiter (tabs first, with `<<-`); bash reads it as the command's input, so none
// of it is script.
void ShellLexer::skip_heredoc_bodies() {
  for (const auto& [delimiter, strip_tabs] : heredocs_) {
    while (pos_ < text_.size()) {
      std::size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = std::min(end + 1, text_.size());
      ++line_;
      if (strip_tabs) line.remove_prefix(std::min(line.find_first_not_of('\t'), line.size()));
      if (line == delimiter) break;
    }
  }
  heredocs_.clear();
}

void ShellLexer::scan_single_quote(std::string& raw) {
  const int opened = line_;
  const std::size_t close = text_.find('\'', pos_ + 1);
  if (close == std::string_view::npos) fail(opened, "unclosed ' quote");
  const std::string_view quoted = text_.substr(pos_, close + 1 - pos_);
  line_ += static_cast<int>(std::count(quoted.begin(), quoted.end(), '\n'));
  raw += quoted;
  pos_ = close + 1;
}

// One word: its end is a blank or operator character outside every quote and
// substitution, tracked on a stack of the closers still expected.
ShellToken ShellLexer::lex_word() {
  ShellToken token{ShellTokenKind::word, "", false, line_, pos_, pos_};
  std::string& raw = token.text;
  std::vector<std::pair<char, int>> open;  // closer, line it was opened on
  auto push = [&](char closer, std::string_view opener) {
    if (static_cast<int>(open.size()) >= kMaxShellNesting) {
      fail(line_,
           fmt::format("quotes and substitutions nested more than {} deep", kMaxShellNesting));
    }
    open.emplace_back(closer, line_);
    raw += opener;
    pos_ += opener.size();
  };
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    const char next = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    const char top = open.empty() ? '\0' : open.back().first;
    if (c == '\\') {
      pos_ = std::min(pos_ + 2, text_.size());
      if (next == '\n') {
        ++line_;  // a continuation: both characters vanish
      } else {
        raw += c;
        if (next != '\0') raw += next;
      }
      continue;
    }
    if (top == '\0' && (is_blank(c) || c == '\n' || is_operator_char(c))) {
      if (c == '(' && opens_array(raw)) {
        ++pos_;
        token.kind = ShellTokenKind::array_open;
        token.append = raw[raw.size() - 2] == '+';
        raw.resize(raw.size() - (token.append ? 2 : 1));
      }
      break;
    }
    if (top == '"' || top == '`') {
      if (c == top) {
        open.pop_back();
      } else if (top == '"' && c == '`') {
        push('`', "`");
        continue;
      } else if (top == '"' && c == '$' && (next == '(' || next == '{')) {
        push(next == '(' ? ')' : '}', next == '(' ? "$(" : "${");
        continue;
      }
    } else if (c == '\'') {
      scan_single_quote(raw);
      continue;
    } else if (c == '"' || c == '`') {
      push(c, std::string_view(&text_[pos_], 1));
      continue;
    } else if (c == '$' && (next == '(' || next == '{')) {
      push(next == '(' ? ')' : '}', next == '(' ? "$(" : "${");
      continue;
    } else if (top == ')' && c == '(') {
      push(')', "(");
      continue;
    } else if (c == top) {
      open.pop_back();
    }
    if (c == '\n') ++line_;
    raw += c;
    ++pos_;
  }
  if (!open.empty()) {
    fail(open.back().second, fmt::format("unclosed {}", closer_name(open.back().first)));
  }
  token.end = pos_;
  return token;
}

bool is_shell_word(const ShellToken& token, std::string_view text) {
  return token.kind == ShellTokenKind::word && token.text == text;
}

std::string shell_unquoted(std::string_view raw) {
  std::string out;
  char quote = '\0';
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = '\0';
      } else {
        out += c;
      }
    } else if (c == '\\' && i + 1 < raw.size()) {
      out += raw[++i];
    } else if ((c == '\'' && quote == '\0') || c == '"') {
      quote = quote == c ? '\0' : c;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace shardplan
