// Bash's expansions of a word (bash(1), "EXPANSION", "Word Splitting", "Quote Removal"), for
// the forms launch scripts use; see shell_expand.h for what is left as written.
#include "interop/internal/shell_expand.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "interop/internal/shell_words.h"
#include "models/error.h"

namespace shardplan {
namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// Bash's default IFS: space, tab and newline split an unquoted expansion's result.
bool is_ifs(char c) {
  return c == ' ' || c == '\t' || c == '\n';
}

// The index of the character closing the construct whose body starts at `from` (`closer`
// is '"', '`', ')' or '}'), skipping nested quotes and substitutions; npos when unclosed.
std::size_t find_close(std::string_view raw, std::size_t from, char closer) {
  std::vector<char> open{closer};
  for (std::size_t i = from; i < raw.size(); ++i) {
    const char c = raw[i];
    const char top = open.back();
    const char next = i + 1 < raw.size() ? raw[i + 1] : '\0';
    if (c == '\\') {
      ++i;
      continue;
    }
    if (top == '"' || top == '`') {
      if (c == top) {
        open.pop_back();
      } else if (top == '"' && c == '`') {
        open.push_back('`');
      } else if (top == '"' && c == '$' && (next == '(' || next == '{')) {
        open.push_back(next == '(' ? ')' : '}');
        ++i;
      }
    } else if (c == '\'') {
      i = raw.find('\'', i + 1);
      if (i == std::string_view::npos) return i;
    } else if (c == '"' || c == '`') {
      open.push_back(c);
    } else if (c == '$' && (next == '(' || next == '{')) {
      open.push_back(next == '(' ? ')' : '}');
      ++i;
    } else if (top == ')' && c == '(') {
      open.push_back(')');
    } else if (c == top) {
      open.pop_back();
    }
    if (open.empty()) return i;
  }
  return std::string_view::npos;
}

// $'...': bash's ANSI-C quoting, for the escapes a launch script might hold.
std::string ansi_c_text(std::string_view body) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
  }
  return out;
}

class Arithmetic {
 public:
  // `lookups` counts the variables read by this expression and those it reads (shared).
  Arithmetic(std::string_view text, ShellVariables& variables, int depth, int64_t& lookups)
      : text_(text), variables_(variables), depth_(depth), lookups_(lookups) {}

  std::optional<int64_t> run() {
    if (depth_ > 16) return std::nullopt;  // a variable naming itself, or a long chain
    skip();
    if (pos_ == text_.size()) return 0;  // bash: an empty expression is 0
    const std::optional<int64_t> value = sum();
    skip();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void skip() {
    while (pos_ < text_.size() && is_ifs(text_[pos_])) ++pos_;
  }
  // The operator at pos_ if it is exactly `c` (not the first of ++, --, **, <<, ...).
  bool eat(char c) {
    skip();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    const char next = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    if (next == c || next == '=') return false;
    ++pos_;
    return true;
  }
  std::optional<int64_t> sum() {
    std::optional<int64_t> value = product();
    while (value) {
      int64_t out = 0;
      if (eat('+')) {
        const auto rhs = product();
        if (!rhs || __builtin_add_overflow(*value, *rhs, &out)) return std::nullopt;
      } else if (eat('-')) {
        const auto rhs = product();
        if (!rhs || __builtin_sub_overflow(*value, *rhs, &out)) return std::nullopt;
      } else {
        break;
      }
      value = out;
    }
    return value;
  }
  std::optional<int64_t> product() {
    std::optional<int64_t> value = unary();
    while (value) {
      const bool times = eat('*');
      const bool divide = !times && eat('/');
      const bool modulo = !times && !divide && eat('%');
      if (!times && !divide && !modulo) break;
      const auto rhs = unary();
      if (!rhs) return std::nullopt;
      int64_t out = 0;
      if (times) {
        if (__builtin_mul_overflow(*value, *rhs, &out)) return std::nullopt;
      } else {
        // bash stops on division by zero; INT64_MIN / -1 overflows.
        if (*rhs == 0 || (*value == INT64_MIN && *rhs == -1)) return std::nullopt;
        out = divide ? *value / *rhs : *value % *rhs;
      }
      value = out;
    }
    return value;
  }
  std::optional<int64_t> unary() {
    if (++nesting_ > kMaxShellNesting) return std::nullopt;
    std::optional<int64_t> value;
    if (eat('-')) {
      value = unary();
      if (value && *value == INT64_MIN) value.reset();
      if (value) value = -*value;
    } else if (eat('+')) {
      value = unary();
    } else {
      value = primary();
    }
    --nesting_;
    return value;
  }
  std::optional<int64_t> primary() {
    skip();
    if (pos_ >= text_.size()) return std::nullopt;
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      const std::optional<int64_t> value = sum();
      if (!eat(')')) return std::nullopt;
      return value;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) return number();
    if (!is_name_start(c)) return std::nullopt;
    const std::size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    // Each name is read and evaluated again where it is used: A1="A0+A0+...", A2="A1+A1+..."
    // doubles the work at every level (8^12 evaluations took minutes). Past the budget the
    // expression is left as written, as one the reader cannot evaluate.
    constexpr int64_t kMaxLookups = 100'000;
    if (++lookups_ > kMaxLookups) return std::nullopt;
    ShellVariable* variable = variables_.find(text_.substr(start, pos_ - start));
    if (variable == nullptr || variable->values.empty()) return std::nullopt;
    variable->referenced = true;
    return Arithmetic(variable->values.front(), variables_, depth_ + 1, lookups_).run();
  }
  std::optional<int64_t> number() {
    int base = 10;
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() &&
        (text_[pos_ + 1] == 'x' || text_[pos_ + 1] == 'X')) {
      base = 16;
      pos_ += 2;
    } else if (text_[pos_] == '0') {
      base = 8;  // bash reads a leading 0 as octal
    }
    int64_t value = 0;
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[pos_])) != 0) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text_[pos_])));
      const int digit = c <= '9' ? c - '0' : c - 'a' + 10;
      if (digit >= base) return std::nullopt;
      if (__builtin_mul_overflow(value, base, &value) ||
          __builtin_add_overflow(value, digit, &value)) {
        return std::nullopt;
      }
      ++pos_;
    }
    if (pos_ == start && base != 8) return std::nullopt;
    if (pos_ < text_.size() && is_name_char(text_[pos_])) return std::nullopt;  // 2#101, 1e3
    return value;
  }

  std::string_view text_;
  ShellVariables& variables_;
  int depth_;
  int64_t& lookups_;
  int nesting_ = 0;
  std::size_t pos_ = 0;
};

}  // namespace

const ShellVariable* ShellVariables::find(std::string_view name) const {
  const auto it = variables_.find(name);
  return it == variables_.end() ? nullptr : &it->second;
}

ShellVariable* ShellVariables::find(std::string_view name) {
  const auto it = variables_.find(name);
  return it == variables_.end() ? nullptr : &it->second;
}

void ShellVariables::assign(const std::string& name, std::vector<std::string> values, bool array,
                            bool append) {
  auto [it, inserted] = variables_.try_emplace(name);
  ShellVariable& v = it->second;
  if (inserted) v.order = next_order_++;
  if (!append || inserted) {
    v.values = std::move(values);
    v.array = array;
    return;
  }
  if (array || v.array) {
    v.array = true;
    v.values.insert(v.values.end(), std::make_move_iterator(values.begin()),
                    std::make_move_iterator(values.end()));
  } else if (!values.empty()) {
    if (v.values.empty()) v.values.emplace_back();
    v.values.front() += values.front();
  }
}

void ShellVariables::unset(std::string_view name) {
  const auto it = variables_.find(name);
  if (it != variables_.end()) variables_.erase(it);
}

void ShellVariables::mark_exported(const std::string& name) {
  // `export X` with X unset here: X may come from the environment, so it stays unknown.
  if (ShellVariable* variable = find(name)) variable->exported = true;
}

std::vector<std::pair<std::string, const ShellVariable*>> ShellVariables::in_order() const {
  std::vector<std::pair<std::string, const ShellVariable*>> out;
  for (const auto& [name, variable] : variables_) out.emplace_back(name, &variable);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second->order < b.second->order; });
  return out;
}

void ShellBudget::spend(int64_t bytes, int line) {
  spent_ += bytes;
  if (spent_ > kMaxBytes) {
    throw InputError(label_, fmt::format("line {}", line),
                     fmt::format("the script's variables expand to more than {} MiB of words "
                                 "(a launch script expands to a few KB)",
                                 kMaxBytes >> 20));
  }
}

std::optional<int64_t> shell_arithmetic(std::string_view expression, ShellVariables& variables) {
  int64_t lookups = 0;
  return Arithmetic(expression, variables, 0, lookups).run();
}

// The words one expansion builds (bash(1), "Word Splitting"): literal and quoted text
// joins the current word; an unquoted expansion's blanks end it; `""` makes a word even
// when empty, an unquoted expansion that gives nothing makes none.
class ShellExpander::Fields {
 public:
  Fields(ShellSplit split, ShellBudget& budget, int line)
      : split_(split), budget_(budget), line_(line) {}

  void literal(std::string_view text) {
    append(text);
    exists_ = true;
  }
  void mark() { exists_ = true; }
  void split_text(std::string_view text) {
    if (split_ == ShellSplit::single) {
      append(text);
      return;
    }
    for (const char c : text) {
      if (is_ifs(c)) {
        finish();
      } else {
        current_ += c;
        exists_ = true;
      }
    }
    budget_.spend(static_cast<int64_t>(text.size()), line_);
  }
  // Between two elements of an array.
  void next_element() {
    if (split_ == ShellSplit::single) {
      append(" ");
    } else {
      finish();
    }
  }
  // "${A[@]}" gives no word at all for an empty array, even inside quotes.
  void quoted_all_elements() { ++quoted_all_; }
  int quoted_all() const { return quoted_all_; }
  void unresolved() { resolved_ = false; }

  ShellExpansion take() {
    finish();
    if (split_ == ShellSplit::single && fields_.empty()) fields_.emplace_back();
    return ShellExpansion{std::move(fields_), resolved_};
  }

 private:
  void append(std::string_view text) {
    current_ += text;
    budget_.spend(static_cast<int64_t>(text.size()), line_);
  }
  void finish() {
    if (split_ == ShellSplit::single) {
      if (fields_.empty()) fields_.emplace_back();
      fields_.front() += current_;
    } else if (exists_) {
      budget_.spend(ShellBudget::kWordOverheadBytes, line_);
      fields_.push_back(current_);
    }
    current_.clear();
    exists_ = false;
  }

  ShellSplit split_;
  ShellBudget& budget_;
  int line_;
  std::vector<std::string> fields_;
  std::string current_;
  bool exists_ = false;
  bool resolved_ = true;
  int quoted_all_ = 0;
};

// quoted: inside "..." (backslash escapes only $ ` " \ newline; no quote removal of ').
// split_expansions: an unquoted expansion's result is split. split_literals: literal text
// is split too (the word of an unquoted ${X:-a b}).
struct ShellExpander::Context {
  bool quoted = false;
  bool split_expansions = true;
  bool split_literals = false;
};

ShellExpansion ShellExpander::expand(std::string_view raw, ShellSplit split, int line) {
  line_ = line;
  Fields out(split, budget_, line);
  expand_into(raw, Context{false, split == ShellSplit::words, false}, out, 0);
  return out.take();
}

void ShellExpander::left_as_written(std::string_view text, bool note, Fields& out) {
  out.literal(text);
  out.unresolved();
  constexpr std::size_t kMaxNotes = 100;
  if (note && not_run_.size() < kMaxNotes &&
      std::find(not_run_.begin(), not_run_.end(), text) == not_run_.end()) {
    not_run_.emplace_back(text);
  }
}

void ShellExpander::expand_into(std::string_view raw, const Context& context, Fields& out,
                                int depth) {
  if (depth > kMaxShellNesting) {
    throw InputError(budget_.label(), fmt::format("line {}", line_),
                     fmt::format("expansions nested more than {} deep", kMaxShellNesting));
  }
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    const char next = i + 1 < raw.size() ? raw[i + 1] : '\0';
    if (!context.quoted && c == '\'') {
      const std::size_t close = std::min(raw.find('\'', i + 1), raw.size());
      out.literal(raw.substr(i + 1, close - i - 1));
      i = close;
    } else if (!context.quoted && c == '"') {
      const std::size_t close = std::min(find_close(raw, i + 1, '"'), raw.size());
      const int before = out.quoted_all();
      expand_into(raw.substr(i + 1, close - i - 1), Context{true, false, false}, out, depth + 1);
      if (out.quoted_all() == before) out.mark();
      i = close;
    } else if (!context.quoted && c == '$' && next == '\'') {
      std::size_t close = i + 2;
      while (close < raw.size() && raw[close] != '\'') close += raw[close] == '\\' ? 2 : 1;
      close = std::min(close, raw.size());
      out.literal(ansi_c_text(raw.substr(i + 2, close - i - 2)));
      i = close;
    } else if (c == '\\' && i + 1 < raw.size()) {
      // In double quotes a backslash escapes only $ ` " \ and newline.
      if (context.quoted && std::string_view("$`\"\\\n").find(next) == std::string_view::npos) {
        out.literal("\\");
      }
      out.literal(raw.substr(++i, 1));
    } else if (c == '$') {
      i = expand_dollar(raw, i, context, out, depth) - 1;
    } else if (c == '`') {
      const std::size_t close = std::min(find_close(raw, i + 1, '`'), raw.size() - 1);
      left_as_written(raw.substr(i, close - i + 1), true, out);
      i = close;
    } else if (!context.quoted && context.split_literals) {
      out.split_text(raw.substr(i, 1));
    } else {
      out.literal(raw.substr(i, 1));
    }
  }
}

// Expands the `$...` at raw[at]; returns the index after it.
std::size_t ShellExpander::expand_dollar(std::string_view raw, std::size_t at,
                                         const Context& context, Fields& out, int depth) {
  const char next = at + 1 < raw.size() ? raw[at + 1] : '\0';
  if (next == '(' && at + 2 < raw.size() && raw[at + 2] == '(') {
    return expand_arithmetic(raw, at, context, out, depth);
  }
  if (next == '(') {
    const std::size_t close = std::min(find_close(raw, at + 2, ')'), raw.size() - 1);
    left_as_written(raw.substr(at, close - at + 1), true, out);
    return close + 1;
  }
  if (next == '{') return expand_braces(raw, at, context, out, depth);
  if (is_name_start(next)) {
    std::size_t end = at + 1;
    while (end < raw.size() && is_name_char(raw[end])) ++end;
    const std::string_view name = raw.substr(at + 1, end - at - 1);
    ShellVariable* variable = variables_.find(name);
    if (variable == nullptr) {
      left_as_written(raw.substr(at, end - at), false, out);
    } else {
      variable->referenced = true;
      emit_values(variable->values.empty() ? std::vector<std::string>{""}
                                           : std::vector<std::string>{variable->values.front()},
                  false, false, context, out);
    }
    return end;
  }
  if (next != '\0' && (std::isdigit(static_cast<unsigned char>(next)) != 0 ||
                       std::string_view("@*#?$!-").find(next) != std::string_view::npos)) {
    // Positional and special parameters: the script is read without arguments, none run.
    left_as_written(raw.substr(at, 2), false, out);
    return at + 2;
  }
  out.literal("$");
  return at + 1;
}

std::size_t ShellExpander::expand_arithmetic(std::string_view raw, std::size_t at,
                                             const Context& context, Fields& out, int depth) {
  const std::size_t close = find_close(raw, at + 2, ')');
  if (close == std::string_view::npos || raw[close - 1] != ')') {
    // `$( (a subshell) )`, not arithmetic.
    const std::size_t end = std::min(close, raw.size() - 1);
    left_as_written(raw.substr(at, end - at + 1), true, out);
    return end + 1;
  }
  const std::string_view whole = raw.substr(at, close - at + 1);
  Fields inner(ShellSplit::single, budget_, line_);
  expand_into(raw.substr(at + 3, close - 1 - (at + 3)), Context{false, false, false}, inner,
              depth + 1);
  const ShellExpansion text = inner.take();
  const std::optional<int64_t> value =
      text.resolved ? shell_arithmetic(text.fields.front(), variables_) : std::nullopt;
  if (!value) {
    left_as_written(whole, true, out);
  } else {
    emit_values({std::to_string(*value)}, false, false, context, out);
  }
  return close + 1;
}

// ${NAME}, ${NAME[@]}, ${#NAME}, ${NAME:-word} and the other operators of bash(1),
// "Parameter Expansion", that test for unset or empty; any other form is left as written.
std::size_t ShellExpander::expand_braces(std::string_view raw, std::size_t at,
                                         const Context& context, Fields& out, int depth) {
  const std::size_t close = std::min(find_close(raw, at + 2, '}'), raw.size() - 1);
  const std::string_view whole = raw.substr(at, close - at + 1);
  std::string_view inner = raw.substr(at + 2, close - at - 2);
  const bool length = inner.size() > 1 && inner.front() == '#';
  if (length) inner.remove_prefix(1);
  std::size_t pos = 0;
  while (pos < inner.size() && (is_name_char(inner[pos]))) ++pos;
  if (pos == 0 && !inner.empty() &&
      std::string_view("@*#?$!-").find(inner[0]) != std::string_view::npos) {
    pos = 1;
  }
  const std::string_view name = inner.substr(0, pos);
  std::string_view subscript;
  if (pos < inner.size() && inner[pos] == '[') {
    const std::size_t end = inner.find(']', pos);
    if (end == std::string_view::npos) {
      left_as_written(whole, true, out);
      return close + 1;
    }
    subscript = inner.substr(pos + 1, end - pos - 1);
    pos = end + 1;
  }
  std::string_view rest = inner.substr(pos);
  std::string_view op;
  for (std::string_view candidate : {":-", ":=", ":+", ":?", "-", "=", "+", "?"}) {
    if (rest.substr(0, candidate.size()) == candidate) {
      op = candidate;
      break;
    }
  }
  const std::string_view word = rest.substr(op.size());
  const bool named_variable = !name.empty() && is_name_start(name.front());
  const bool all = subscript == "@" || subscript == "*";
  const bool indexed = !subscript.empty() && !all;
  const bool plain_index =
      indexed &&
      std::all_of(subscript.begin(), subscript.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
      subscript.size() < 9;
  if (name.empty() || (op.empty() && !rest.empty()) || (length && !op.empty()) ||
      (indexed && !plain_index) || (!subscript.empty() && !named_variable)) {
    left_as_written(whole, true, out);  // ${X%suffix}, ${X/a/b}, ${X:0:2}, ${A[$i]}, ...
    return close + 1;
  }
  ShellVariable* variable = named_variable ? variables_.find(name) : nullptr;
  std::vector<std::string> values;
  bool set = variable != nullptr;
  if (variable != nullptr) {
    variable->referenced = true;
    if (all) {
      values = variable->values;
    } else {
      const std::size_t index = indexed ? std::stoul(std::string(subscript)) : 0;
      set = index < variable->values.size() || (index == 0 && variable->values.empty());
      if (set) values.push_back(index < variable->values.size() ? variable->values[index] : "");
    }
  }
  if (length) {
    if (!set) {
      left_as_written(whole, false, out);
    } else {
      emit_values({std::to_string(all ? values.size() : values.front().size())}, false, false,
                  context, out);
    }
    return close + 1;
  }
  const bool null = !set || std::all_of(values.begin(), values.end(),
                                        [](const std::string& v) { return v.empty(); });
  const bool colon = op.size() == 2;
  const bool missing = colon ? null : !set;
  const Context word_context{false, context.split_expansions && !context.quoted,
                             context.split_expansions && !context.quoted};
  if ((op.ends_with('-') || op.ends_with('=')) && missing) {
    if (op.ends_with('=') && named_variable && !all) {
      Fields value(ShellSplit::single, budget_, line_);
      expand_into(word, Context{false, false, false}, value, depth + 1);
      const ShellExpansion assigned = value.take();
      variables_.assign(std::string(name), assigned.fields, false, false);
      emit_values(assigned.fields, false, false, context, out);
    } else {
      expand_into(word, word_context, out, depth + 1);
    }
  } else if (op.ends_with('+')) {
    if (!missing) expand_into(word, word_context, out, depth + 1);
  } else if (!set || (op.ends_with('?') && missing)) {
    left_as_written(whole, false, out);  // unset: unknown here, so it stays as written
  } else {
    emit_values(values, all, subscript == "*", context, out);
  }
  return close + 1;
}

void ShellExpander::emit_values(const std::vector<std::string>& values, bool all, bool star,
                                const Context& context, Fields& out) {
  if (context.quoted && all && star) {
    std::string joined;
    for (std::size_t i = 0; i < values.size(); ++i) joined += (i > 0 ? " " : "") + values[i];
    out.literal(joined);
    return;
  }
  if (context.quoted && all) out.quoted_all_elements();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.next_element();
    if (context.quoted || !context.split_expansions) {
      out.literal(values[i]);
    } else {
      out.split_text(values[i]);
    }
  }
}

}  // namespace shardplan
