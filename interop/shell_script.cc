// Reading a launch script as bash would run it (bash(1), "SHELL GRAMMAR"), one command at
// a time: a command list is and-or lists of pipelines of commands, a command is simple
// (assignments, words, redirections) or compound (if, case, while/until, for, { }, ( ),
// [[ ]], a function definition). Every construct is parsed in full; `active` says whether
// its effects (assignments, the commands' words) happen, so a branch not taken is
// checked for syntax but changes nothing.
#include "interop/internal/shell_script.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <set>

#include "interop/internal/shell_words.h"
#include "models/error.h"

namespace shardplan {
namespace {

// yes / no: a test's outcome; unknown: a test needing what is not known here; ran: an
// ordinary command, taken to succeed but not to decide an `if`.
enum class Status { yes, no, unknown, ran };

Status negate(Status s) {
  return s == Status::yes ? Status::no : s == Status::no ? Status::yes : Status::unknown;
}

// Kleene's three-valued and / or: unknown unless the known side decides.
Status both(Status a, Status b) {
  if (a == Status::no || b == Status::no) return Status::no;
  return a == Status::yes && b == Status::yes ? Status::yes : Status::unknown;
}
Status either(Status a, Status b) {
  if (a == Status::yes || b == Status::yes) return Status::yes;
  return a == Status::no && b == Status::no ? Status::no : Status::unknown;
}

constexpr int kMaxEvalDepth = 8;

bool is_name(std::string_view text) {
  if (text.empty() || (std::isalpha(static_cast<unsigned char>(text[0])) == 0 && text[0] != '_')) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

bool is_redirection(std::string_view op) {
  const std::size_t start = op.find_first_not_of("0123456789");
  return start != std::string_view::npos &&
         (op[start] == '<' || op[start] == '>' || op.substr(start, 2) == "&>");
}

bool ends_command(const ShellToken& t) {
  return t.kind == ShellTokenKind::end || t.kind == ShellTokenKind::newline ||
         (t.kind == ShellTokenKind::op && !is_redirection(t.text));
}

// `}` and the words that close a compound command end a list wherever they stand.
bool is_closing_word(std::string_view word) {
  for (std::string_view w : {"then", "elif", "else", "fi", "do", "done", "esac", "}"}) {
    if (word == w) return true;
  }
  return false;
}

bool is_declaration(std::string_view name) {
  return name == "export" || name == "declare" || name == "typeset" || name == "local" ||
         name == "readonly";
}

// `NAME=value`, `NAME+=value`, `NAME[index]=value`.
struct Assignment {
  std::string name;
  std::string index;  // NAME[index]=
  std::string raw_value;
  std::vector<std::string> elements;  // NAME=( ... ), already expanded
  bool array = false;
  bool append = false;
  int line = 0;
};

std::optional<Assignment> parse_assignment(const ShellToken& word) {
  const std::string& raw = word.text;
  const std::size_t eq = raw.find('=');
  if (eq == std::string::npos || eq == 0) return std::nullopt;
  Assignment a;
  a.line = word.line;
  std::string_view target(raw.data(), eq);
  if (target.back() == '+') {
    a.append = true;
    target.remove_suffix(1);
  }
  if (!target.empty() && target.back() == ']') {
    const std::size_t open = target.find('[');
    if (open == std::string_view::npos) return std::nullopt;
    a.index = std::string(target.substr(open + 1, target.size() - open - 2));
    target = target.substr(0, open);
  }
  if (!is_name(target)) return std::nullopt;
  a.name = std::string(target);
  a.raw_value = raw.substr(eq + 1);
  return a;
}

// A short form of a piece of the script for a note: blanks folded, cut at 60 characters.
std::string snippet(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  constexpr std::size_t kShown = 60;
  if (out.size() > kShown) out = out.substr(0, kShown) + "...";
  return out;
}

struct TestWord {
  std::string text;
  bool resolved = true;
  bool op = false;  // an operator token inside [[ ]] (&&, ||, (, ), <, >)
};

// The expression of `[ ... ]`, `test ...` or `[[ ... ]]` (bash(1), "CONDITIONAL
// EXPRESSIONS"): string and integer comparisons, -z / -n, !, and/or, parentheses. File
// tests and regular expressions are unknown here.
class TestExpression {
 public:
  TestExpression(std::vector<TestWord> words, bool double_bracket)
      : words_(std::move(words)), double_bracket_(double_bracket) {}

  Status run() {
    if (words_.empty()) return Status::no;
    const Status s = any();
    return pos_ == words_.size() ? s : Status::unknown;
  }

 private:
  bool at(std::string_view text) const {
    return pos_ < words_.size() && words_[pos_].text == text &&
           (words_[pos_].op || !double_bracket_ || (text != "&&" && text != "||"));
  }
  Status any() {
    if (++depth_ > kMaxShellNesting) return Status::unknown;
    Status s = all();
    while (at(double_bracket_ ? "||" : "-o")) {
      ++pos_;
      s = either(s, all());
    }
    --depth_;
    return s;
  }
  Status all() {
    Status s = negation();
    while (at(double_bracket_ ? "&&" : "-a")) {
      ++pos_;
      s = both(s, negation());
    }
    return s;
  }
  Status negation() {
    if (at("!") && pos_ + 1 < words_.size()) {
      ++pos_;
      return negate(negation());
    }
    return primary();
  }
  Status primary() {
    if (pos_ >= words_.size()) return Status::unknown;
    if (at("(")) {
      ++pos_;
      const Status s = any();
      if (!at(")")) return Status::unknown;
      ++pos_;
      return s;
    }
    if (pos_ + 2 < words_.size() + 0 && is_binary(words_[pos_ + 1].text)) {
      const TestWord& lhs = words_[pos_];
      const std::string op = words_[pos_ + 1].text;
      const TestWord& rhs = words_[pos_ + 2];
      pos_ += 3;
      return compare(lhs, op, rhs);
    }
    const TestWord& first = words_[pos_];
    if (first.text.size() == 2 && first.text[0] == '-' && !first.op && pos_ + 1 < words_.size()) {
      const TestWord& operand = words_[pos_ + 1];
      pos_ += 2;
      if (!operand.resolved) return Status::unknown;
      if (first.text == "-z") return operand.text.empty() ? Status::yes : Status::no;
      if (first.text == "-n") return operand.text.empty() ? Status::no : Status::yes;
      return Status::unknown;  // -f, -d, -e, -x, -v, ...: the file system or the shell's state
    }
    ++pos_;
    if (!first.resolved) return Status::unknown;
    return first.text.empty() ? Status::no : Status::yes;
  }
  static bool is_binary(std::string_view op) {
    for (std::string_view b : {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge",
                               "=~", "-nt", "-ot", "-ef"}) {
      if (op == b) return true;
    }
    return false;
  }
  static std::optional<int64_t> integer(const std::string& text) {
    if (text.empty() || text.size() > 18) return std::nullopt;
    const std::size_t digits = text[0] == '-' || text[0] == '+' ? 1 : 0;
    if (digits == text.size() ||
        text.find_first_not_of("0123456789", digits) != std::string::npos) {
      return std::nullopt;
    }
    return std::stoll(text);
  }
  Status compare(const TestWord& lhs, const std::string& op, const TestWord& rhs) const {
    if (!lhs.resolved || !rhs.resolved) return Status::unknown;
    const auto yes_if = [](bool b) { return b ? Status::yes : Status::no; };
    if (op == "=" || op == "==" || op == "!=") {
      // [[ ]] matches the right side as a pattern.
      const bool equal = double_bracket_ ? fnmatch(rhs.text.c_str(), lhs.text.c_str(), 0) == 0
                                         : lhs.text == rhs.text;
      return yes_if(op == "!=" ? !equal : equal);
    }
    if (op == "<" || op == ">")
      return yes_if(op == "<" ? lhs.text < rhs.text : lhs.text > rhs.text);
    const std::optional<int64_t> a = integer(lhs.text);
    const std::optional<int64_t> b = integer(rhs.text);
    if (!a || !b) return Status::unknown;  // -eq and its kin on non-numbers, =~, -nt, ...
    if (op == "-eq") return yes_if(*a == *b);
    if (op == "-ne") return yes_if(*a != *b);
    if (op == "-lt") return yes_if(*a < *b);
    if (op == "-le") return yes_if(*a <= *b);
    if (op == "-gt") return yes_if(*a > *b);
    if (op == "-ge") return yes_if(*a >= *b);
    return Status::unknown;
  }

  std::vector<TestWord> words_;
  bool double_bracket_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

class Interpreter {
 public:
  Interpreter(std::string_view text, const std::string& label, ShellScript& script,
              ShellBudget& budget, int eval_depth)
      : lex_(text, label),
        script_(script),
        budget_(budget),
        expander_(script.variables, budget, script.not_run),
        eval_depth_(eval_depth) {}

  void run() { list({}, true); }
  bool exited() const { return exited_; }

 private:
  struct ListEnd {
    std::string terminator;  // the word or operator that ended it; empty at the end
    Status status = Status::yes;
  };

  // Compound commands nest at most kMaxShellNesting deep.
  class Nesting {
   public:
    Nesting(Interpreter& in, int line) : in_(in) {
      if (++in_.nesting_ > kMaxShellNesting) {
        in_.fail(line, fmt::format("compound commands nested more than {} deep", kMaxShellNesting));
      }
    }
    ~Nesting() { --in_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Interpreter& in_;
  };

  [[noreturn]] void fail(int line, const std::string& reason) const {
    throw InputError(lex_.label(), fmt::format("line {}", line), reason);
  }
  bool live(bool active) const { return active && !exited_; }
  const ShellToken& peek() { return lex_.peek(); }
  ShellToken take() {
    ShellToken t = lex_.next();
    last_end_ = t.end;
    return t;
  }
  bool peek_word(std::string_view word) { return is_shell_word(peek(), word); }
  bool peek_op(std::string_view op) {
    return peek().kind == ShellTokenKind::op && peek().text == op;
  }
  void skip_newlines() {
    while (peek().kind == ShellTokenKind::newline) take();
  }
  void expect_word(std::string_view word) {
    if (!peek_word(word)) {
      fail(peek().line, fmt::format("expected '{}' here", word));
    }
    take();
  }
  std::string_view source(std::size_t begin, std::size_t end) const {
    return lex_.source().substr(begin, end > begin ? end - begin : 0);
  }
  void not_read(int line, std::string_view what, std::string_view why) {
    script_.not_read.add(fmt::format("line {}: {} ({})", line, snippet(what), why));
  }

  ListEnd list(std::initializer_list<std::string_view> ends, bool active);
  Status and_or(bool active);
  Status pipeline(bool active);
  Status command(bool active);
  Status simple_command(bool active);
  Status if_clause(bool active);
  Status loop_clause(bool active);
  Status for_clause(bool active);
  Status case_clause(bool active);
  Status subshell(bool active);
  Status double_bracket(bool active);
  Status function_definition(bool active, const std::string& name);
  void redirections();
  std::vector<std::string> array_elements(bool active);
  void assign(const Assignment& a);
  Status run_command(const std::vector<std::string>& words, const std::vector<bool>& resolved,
                     const std::vector<Assignment>& prefix, const std::vector<Assignment>& declared,
                     int line);
  void run_eval(const std::vector<std::string>& words, int line);

  ShellLexer lex_;
  ShellScript& script_;
  ShellBudget& budget_;
  ShellExpander expander_;
  int eval_depth_;
  int nesting_ = 0;
  bool exited_ = false;
  std::size_t last_end_ = 0;
  std::size_t list_end_ = 0;  // where the last list() ended, before its terminator
  std::set<std::string, std::less<>> functions_;
};

Interpreter::ListEnd Interpreter::list(std::initializer_list<std::string_view> ends, bool active) {
  Status status = Status::yes;
  const auto is_end = [&](const ShellToken& t) {
    if (t.kind != ShellTokenKind::word && t.kind != ShellTokenKind::op) return false;
    return std::find(ends.begin(), ends.end(), t.text) != ends.end();
  };
  for (;;) {
    const ShellToken& t = peek();
    if (t.kind == ShellTokenKind::newline ||
        (t.kind == ShellTokenKind::op && (t.text == ";" || t.text == "&"))) {
      take();
      continue;
    }
    if (t.kind == ShellTokenKind::end) {
      if (ends.size() > 0) {
        // The last is the construct's own end (fi, done, esac, }, ...).
        fail(t.line, fmt::format("'{}' expected before the end of the script", *(ends.end() - 1)));
      }
      return {"", status};
    }
    if (is_end(t)) {
      list_end_ = last_end_;
      return {take().text, status};
    }
    if ((t.kind == ShellTokenKind::word && is_closing_word(t.text)) ||
        (t.kind == ShellTokenKind::op &&
         (t.text == ")" || t.text.rfind(";;", 0) == 0 || t.text == ";&"))) {
      fail(t.line, fmt::format("unexpected '{}'", t.text));
    }
    status = and_or(active);
  }
}

Status Interpreter::and_or(bool active) {
  Status status = pipeline(active);
  while (peek_op("&&") || peek_op("||")) {
    const bool conjunction = take().text == "&&";
    skip_newlines();
    const bool decided = status != Status::unknown;
    const bool succeeded = status == Status::yes || status == Status::ran;
    const bool run_next = live(active) && decided && (conjunction == succeeded);
    const std::size_t begin = peek().begin;
    const int line = peek().line;
    const Status next = pipeline(run_next);
    if (live(active) && !decided) {
      not_read(line, source(begin, last_end_), "it follows a test that needs running to decide");
    }
    if (run_next) status = next;
    if (!decided) status = Status::unknown;
  }
  return status;
}

Status Interpreter::pipeline(bool active) {
  bool negated = false;
  while (peek_word("!")) {
    take();
    negated = !negated;
  }
  Status status = command(active);
  while (peek_op("|") || peek_op("|&")) {
    take();
    skip_newlines();
    status = command(active);
  }
  return negated ? negate(status) : status;
}

Status Interpreter::command(bool active) {
  const ShellToken& t = peek();
  Status status = Status::ran;
  if (t.kind == ShellTokenKind::op && t.text == "(") {
    status = subshell(active);
  } else if (t.kind != ShellTokenKind::word) {
    return simple_command(active);
  } else if (t.text == "if") {
    status = if_clause(active);
  } else if (t.text == "while" || t.text == "until") {
    status = loop_clause(active);
  } else if (t.text == "for" || t.text == "select") {
    status = for_clause(active);
  } else if (t.text == "case") {
    status = case_clause(active);
  } else if (t.text == "[[") {
    status = double_bracket(active);
  } else if (t.text == "{") {
    const Nesting nesting(*this, t.line);
    take();
    status = list({"}"}, active).status;
  } else if (t.text == "function") {
    take();
    if (peek().kind != ShellTokenKind::word) fail(peek().line, "a function name expected");
    const std::string name = take().text;
    if (peek_op("(")) {
      take();
      if (!peek_op(")")) fail(peek().line, "')' expected after '('");
      take();
    }
    return function_definition(active, name);
  } else {
    return simple_command(active);
  }
  redirections();
  return status;
}

void Interpreter::redirections() {
  while (peek().kind == ShellTokenKind::op && is_redirection(peek().text)) {
    take();
    if (peek().kind == ShellTokenKind::word) take();
  }
}

Status Interpreter::if_clause(bool active) {
  const Nesting nesting(*this, peek().line);
  take();                  // if
  bool chosen = false;     // a branch has run
  bool undecided = false;  // a test could not be decided: no later branch runs
  for (;;) {
    const bool testing = live(active) && !chosen && !undecided;
    const std::size_t begin = peek().begin;
    const int line = peek().line;
    const ListEnd test = list({"then"}, testing);
    bool run_branch = false;
    if (testing) {
      if (test.status == Status::yes) {
        run_branch = chosen = true;
      } else if (test.status != Status::no) {
        undecided = true;
        not_read(line, "if " + std::string(source(begin, list_end_)),
                 "its test needs running to decide; no branch read");
      }
    }
    const ListEnd body = list({"elif", "else", "fi"}, run_branch);
    if (body.terminator == "elif") continue;
    if (body.terminator == "else") {
      list({"fi"}, live(active) && !chosen && !undecided);
    }
    return Status::yes;
  }
}

Status Interpreter::loop_clause(bool active) {
  const Nesting nesting(*this, peek().line);
  const bool until = take().text == "until";
  const std::size_t begin = peek().begin;
  const int line = peek().line;
  const ListEnd test = list({"do"}, live(active));
  const std::size_t test_end = list_end_;
  list({"done"}, false);
  const bool never_runs = (until ? test.status == Status::yes : test.status == Status::no);
  if (live(active) && !never_runs) {
    not_read(line, std::string(until ? "until " : "while ") + std::string(source(begin, test_end)),
             "a loop; its body is not read");
  }
  redirections();
  return Status::yes;
}

Status Interpreter::for_clause(bool active) {
  const Nesting nesting(*this, peek().line);
  const std::size_t begin = peek().begin;
  const int line = peek().line;
  take();  // for / select
  while (!peek_word("do")) {
    if (peek().kind == ShellTokenKind::end) fail(line, "'do' expected after 'for'");
    take();
  }
  const std::size_t header_end = last_end_;
  take();  // do
  list({"done"}, false);
  if (live(active)) not_read(line, source(begin, header_end), "a loop; its body is not read");
  return Status::yes;
}

Status Interpreter::case_clause(bool active) {
  const Nesting nesting(*this, peek().line);
  const int line = peek().line;
  take();  // case
  if (peek().kind != ShellTokenKind::word) fail(line, "a word expected after 'case'");
  const ShellToken subject = take();
  skip_newlines();
  expect_word("in");
  const bool run = live(active);
  ShellExpansion value;
  if (run) value = expander_.expand(subject.text, ShellSplit::single, subject.line);
  bool decided = run && value.resolved;
  if (run && !decided) not_read(line, "case " + subject.text, "its word needs running to know");
  bool matched = false;
  bool fall_through = false;
  for (;;) {
    skip_newlines();
    if (peek_word("esac")) {
      take();
      return Status::yes;
    }
    if (peek_op("(")) take();
    bool branch = fall_through;
    for (;;) {
      if (peek().kind != ShellTokenKind::word) fail(peek().line, "a case pattern expected");
      const ShellToken pattern = take();
      if (decided && !matched && !branch) {
        const ShellExpansion p = expander_.expand(pattern.text, ShellSplit::single, pattern.line);
        if (!p.resolved) {
          decided = false;
          not_read(pattern.line, "case pattern " + pattern.text, "it needs running to know");
        } else {
          branch = fnmatch(p.fields.front().c_str(), value.fields.front().c_str(), 0) == 0;
        }
      }
      if (!peek_op("|")) break;
      take();
    }
    if (!peek_op(")")) fail(peek().line, "')' expected after a case pattern");
    take();
    const bool runs = decided && !matched && branch;
    const ListEnd end = list({";;", ";&", ";;&", "esac"}, runs);
    if (runs) matched = end.terminator != ";;&";
    fall_through = runs && end.terminator == ";&";
    if (end.terminator == "esac") return Status::yes;
  }
}

Status Interpreter::subshell(bool active) {
  const Nesting nesting(*this, peek().line);
  take();  // (
  // Assignments in a subshell do not reach the script; neither does its exit.
  const bool run = live(active);
  const ShellVariables saved = run ? script_.variables : ShellVariables();
  const bool exited = exited_;
  const Status status = list({")"}, active).status;
  if (run) script_.variables = saved;
  exited_ = exited;
  return status;
}

Status Interpreter::double_bracket(bool active) {
  const int line = peek().line;
  take();  // [[
  std::vector<TestWord> words;
  for (;;) {
    const ShellToken& t = peek();
    if (t.kind == ShellTokenKind::end) fail(line, "']]' expected");
    if (is_shell_word(t, "]]")) {
      take();
      break;
    }
    const ShellToken token = take();
    if (token.kind == ShellTokenKind::newline) continue;
    if (token.kind != ShellTokenKind::word) {
      words.push_back(TestWord{token.text, true, true});
    } else if (live(active)) {
      const ShellExpansion e = expander_.expand(token.text, ShellSplit::single, token.line);
      words.push_back(TestWord{e.fields.front(), e.resolved, false});
    }
  }
  if (!live(active)) return Status::unknown;
  return TestExpression(std::move(words), true).run();
}

Status Interpreter::function_definition(bool active, const std::string& name) {
  skip_newlines();
  command(false);  // the body runs only when called
  if (live(active)) functions_.insert(name);
  return Status::yes;
}

std::vector<std::string> Interpreter::array_elements(bool active) {
  std::vector<std::string> elements;
  for (;;) {
    const ShellToken& t = peek();
    if (t.kind == ShellTokenKind::newline) {
      take();
    } else if (t.kind == ShellTokenKind::op && t.text == ")") {
      take();
      return elements;
    } else if (t.kind == ShellTokenKind::word) {
      const ShellToken word = take();
      if (live(active)) {
        ShellExpansion e = expander_.expand(word.text, ShellSplit::words, word.line);
        elements.insert(elements.end(), std::make_move_iterator(e.fields.begin()),
                        std::make_move_iterator(e.fields.end()));
      }
    } else {
      fail(t.line, "')' expected to close the array");
    }
  }
}

Status Interpreter::simple_command(bool active) {
  const bool run = live(active);
  const int line = peek().line;
  std::vector<Assignment> prefix;    // before the command's name
  std::vector<Assignment> declared;  // arguments of export / declare / local
  std::vector<std::string> words;
  std::vector<bool> resolved;
  bool named = false;
  bool declaration = false;
  while (!ends_command(peek())) {
    if (peek().kind == ShellTokenKind::op) {  // a redirection and its target
      take();
      if (peek().kind == ShellTokenKind::word) take();
      continue;
    }
    if (peek().kind == ShellTokenKind::array_open) {
      const ShellToken open = take();
      Assignment a{open.text, "", "", array_elements(active), true, open.append, open.line};
      (named ? declared : prefix).push_back(std::move(a));
      continue;
    }
    const ShellToken word = take();
    if (!named || declaration) {
      if (std::optional<Assignment> a = parse_assignment(word)) {
        (named ? declared : prefix).push_back(std::move(*a));
        continue;
      }
    }
    if (!named && words.empty() && peek_op("(") && is_name(word.text)) {
      take();
      if (!peek_op(")")) fail(peek().line, "')' expected after '('");
      take();
      return function_definition(active, word.text);
    }
    if (!run) {
      named = true;
      continue;
    }
    ShellExpansion e = expander_.expand(word.text, ShellSplit::words, word.line);
    resolved.insert(resolved.end(), e.fields.size(), e.resolved);
    words.insert(words.end(), std::make_move_iterator(e.fields.begin()),
                 std::make_move_iterator(e.fields.end()));
    if (!named && !words.empty()) {
      named = true;
      declaration = is_declaration(words.front());
    }
  }
  if (!run) return Status::unknown;
  if (words.empty()) {
    for (const Assignment& a : prefix) assign(a);
    return Status::yes;
  }
  return run_command(words, resolved, prefix, declared, line);
}

void Interpreter::assign(const Assignment& a) {
  if (a.array) {
    script_.variables.assign(a.name, a.elements, true, a.append);
    return;
  }
  ShellExpansion value = expander_.expand(a.raw_value, ShellSplit::single, a.line);
  if (a.index.empty()) {
    script_.variables.assign(a.name, std::move(value.fields), false, a.append);
    return;
  }
  ShellVariable* variable = script_.variables.find(a.name);
  // Launch scripts index small arrays; a larger index is left unread rather than
  // allocated.
  const bool plain = !a.index.empty() && a.index.size() < 5 &&
                     a.index.find_first_not_of("0123456789") == std::string::npos;
  if (!plain) {
    not_read(a.line, a.name + "[" + a.index + "]=", "an index other than a number below 10000");
    return;
  }
  const std::size_t index = std::stoul(a.index);
  // Set in place: copying the array for each A[i]=v made a script of such lines cost its
  // lines × the array's size.
  if (variable == nullptr) {
    script_.variables.assign(a.name, {}, /*array=*/true, /*append=*/false);
    variable = script_.variables.find(a.name);
  }
  variable->array = true;
  std::vector<std::string>& values = variable->values;
  if (values.size() <= index) {
    budget_.spend(static_cast<int64_t>(index + 1 - values.size()) * ShellBudget::kWordOverheadBytes,
                  a.line);
    values.resize(index + 1);
  }
  if (a.append) {
    values[index] += value.fields.front();
  } else {
    values[index] = value.fields.front();
  }
}

Status Interpreter::run_command(const std::vector<std::string>& words,
                                const std::vector<bool>& resolved,
                                const std::vector<Assignment>& prefix,
                                const std::vector<Assignment>& declared, int line) {
  const std::string& name = words.front();
  if (is_declaration(name)) {
    for (const Assignment& a : prefix) assign(a);
    const bool exports =
        name == "export" || std::find(words.begin(), words.end(), "-x") != words.end();
    for (const Assignment& a : declared) {
      assign(a);
      if (exports) script_.variables.mark_exported(a.name);
    }
    for (std::size_t i = 1; i < words.size(); ++i) {
      if (exports && is_name(words[i])) script_.variables.mark_exported(words[i]);
    }
    return Status::yes;
  }
  if (name == "unset") {
    for (std::size_t i = 1; i < words.size(); ++i) script_.variables.unset(words[i]);
    return Status::yes;
  }
  if (name == "exit" || name == "return") {
    exited_ = true;
    return Status::yes;
  }
  if (name == "eval") {
    run_eval(words, line);
    return Status::ran;
  }
  if (name == "true" || name == ":") return Status::yes;
  if (name == "false") return Status::no;
  if (name == "[" || name == "test") {
    std::vector<TestWord> test;
    const std::size_t end = words.size() - (name == "[" && words.back() == "]" ? 1 : 0);
    for (std::size_t i = 1; i < end; ++i) test.push_back(TestWord{words[i], resolved[i], false});
    return TestExpression(std::move(test), false).run();
  }
  if (name == "source" || name == ".") {
    not_read(line, fmt::format("{} {}", name, words.size() > 1 ? words[1] : ""),
             "another file is not read");
    return Status::ran;
  }
  if (functions_.count(name) > 0) {
    not_read(line, name, "a function of the script; its body is not read");
    return Status::ran;
  }
  ShellCommand command{words, {}, line};
  for (const Assignment& a : prefix) {
    command.environment.emplace_back(
        a.name,
        a.array ? "" : expander_.expand(a.raw_value, ShellSplit::single, a.line).fields.front());
  }
  script_.commands.push_back(std::move(command));
  return Status::ran;
}

// eval: the words joined, read again as script text (bash(1), "eval").
void Interpreter::run_eval(const std::vector<std::string>& words, int line) {
  std::string text;
  for (std::size_t i = 1; i < words.size(); ++i) text += (i > 1 ? " " : "") + words[i];
  if (eval_depth_ >= kMaxEvalDepth) {
    not_read(line, "eval " + text, fmt::format("eval nested more than {} deep", kMaxEvalDepth));
    return;
  }
  budget_.spend(static_cast<int64_t>(text.size()), line);
  Interpreter inner(text, lex_.label(), script_, budget_, eval_depth_ + 1);
  try {
    inner.run();
  } catch (const InputError& error) {
    not_read(line, "eval " + text, "its text is not a script: " + error.reason());
  }
  exited_ = exited_ || inner.exited();
}

}  // namespace

void ShellNotes::add(std::string entry) {
  if (std::find(entries.begin(), entries.end(), entry) != entries.end()) return;
  if (entries.size() < kMaxEntries) {
    entries.push_back(std::move(entry));
  } else {
    ++more;
  }
}

ShellScript read_shell_script(std::string_view text, const std::string& label) {
  ShellScript script;
  ShellBudget budget(label);
  Interpreter(text, label, script, budget, 0).run();
  return script;
}

}  // namespace shardplan
