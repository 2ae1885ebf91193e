#pragma once

// Bash's expansions of one word on the variables a script has set (bash(1), "EXPANSION"):
// parameters ($X, ${X}, ${X:-word}, ${X:=word}, ${X:+word}, arrays ${A[@]}, ${A[*]},
// ${A[n]}, ${#X}), $((integer arithmetic)), quote removal, and word splitting of what an
// unquoted expansion produced. Nothing is run: a command substitution ($(...) or `...`),
// a form not listed here, or a variable the script never set stays as written and marks
// the word unresolved, so a value read from it names the variable instead of being empty.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

struct ShellVariable {
  std::vector<std::string> values;  // one value for a string
  bool array = false;
  bool exported = false;
  bool referenced = false;  // expanded somewhere (or named by another's assignment)
  int order = 0;            // when it was first set, for listing in script order
};

// The variables of one run; a subshell works on a copy.
class ShellVariables {
 public:
  const ShellVariable* find(std::string_view name) const;
  ShellVariable* find(std::string_view name);
  // NAME=value, NAME+=value (append: text to a string, elements to an array).
  void assign(const std::string& name, std::vector<std::string> values, bool array, bool append);
  void unset(std::string_view name);
  void mark_exported(const std::string& name);
  // All variables in the order they were first set.
  std::vector<std::pair<std::string, const ShellVariable*>> in_order() const;

 private:
  std::map<std::string, ShellVariable, std::less<>> variables_;
  int next_order_ = 0;
};

// Every word and value expanded in one run counts against this budget, in bytes plus a
// per-word overhead: a script's expansions are a few KB, and the cap keeps a variable
// doubled in a loop of lines (X="$X$X") from taking the machine's memory.
class ShellBudget {
 public:
  static constexpr int64_t kMaxBytes = int64_t{64} << 20;
  static constexpr int64_t kWordOverheadBytes = 32;
  explicit ShellBudget(std::string label) : label_(std::move(label)) {}
  void spend(int64_t bytes, int line);
  const std::string& label() const { return label_; }

 private:
  std::string label_;
  int64_t spent_ = 0;
};

struct ShellExpansion {
  std::vector<std::string> fields;  // the words (one string where words are not split)
  bool resolved = true;             // false: something in it was left as written
};

enum class ShellSplit {
  words,   // a command's arguments: unquoted expansions split at blanks, empty ones vanish
  single,  // an assignment's value or a [[ ]] operand: one string, arrays joined by spaces
};

class ShellExpander {
 public:
  // `not_run` collects, once each, what the expansions left as written because running it
  // would be needed ("$(nproc)", "$((X / 0))").
  ShellExpander(ShellVariables& variables, ShellBudget& budget, std::vector<std::string>& not_run)
      : variables_(variables), budget_(budget), not_run_(not_run) {}

  ShellExpansion expand(std::string_view raw, ShellSplit split, int line);

 private:
  class Fields;
  struct Context;
  void expand_into(std::string_view raw, const Context& context, Fields& out, int depth);
  std::size_t expand_dollar(std::string_view raw, std::size_t at, const Context& context,
                            Fields& out, int depth);
  std::size_t expand_arithmetic(std::string_view raw, std::size_t at, const Context& context,
                                Fields& out, int depth);
  std::size_t expand_braces(std::string_view raw, std::size_t at, const Context& context,
                            Fields& out, int depth);
  void emit_values(const std::vector<std::string>& values, bool all, bool star,
                   const Context& context, Fields& out);
  void left_as_written(std::string_view text, bool note, Fields& out);

  ShellVariables& variables_;
  ShellBudget& budget_;
  std::vector<std::string>& not_run_;
  int line_ = 0;
};

// Integer arithmetic as bash's $((...)) evaluates it (+ - * / % and parentheses, unary
// signs, decimal, 0x hex and 0 octal numbers, names read as variables holding
// expressions), in int64 without wrapping: overflow, division by zero, an unset name or any
// other operator gives nullopt (the text is then left as written).
std::optional<int64_t> shell_arithmetic(std::string_view expression, ShellVariables& variables);

}  // namespace shardplan
