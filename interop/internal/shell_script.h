#pragma once

// A launch script read as bash would run it, without running anything: the words each
// command gets after bash's expansions (shell_expand.h), in the order bash would run the
// commands. Assignments (NAME=..., NAME=( ... ), NAME+=..., export/declare/local),
// `unset`, `eval` and `exit` act on the shell as bash's do; `if`/`case` take the branch
// their test picks when the test compares values the script set (`[ "$X" = 1 ]`,
// `[[ $N -gt 0 ]]`, `-z`/`-n`, && / || / !). What needs something run to decide (a file
// test, a command's exit status, a loop) is not read and is listed, as are the command
// substitutions left as written. Ordinary commands are taken to succeed, so
// `cmd || exit 1` does not exit.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "interop/internal/shell_expand.h"

namespace shardplan {

struct ShellCommand {
  std::vector<std::string> words;                                // after expansion
  std::vector<std::pair<std::string, std::string>> environment;  // NAME=value before it
  int line = 0;
};

// What the script left unread, each entry once and at most kMaxEntries of them.
struct ShellNotes {
  static constexpr std::size_t kMaxEntries = 20;
  std::vector<std::string> entries;
  std::size_t more = 0;  // entries beyond kMaxEntries
  void add(std::string entry);
};

struct ShellScript {
  std::vector<ShellCommand> commands;
  ShellVariables variables;  // as the script leaves them
  // Substitutions left as written: "$(nproc)", "`date`", "$((N / 0))".
  std::vector<std::string> not_run;
  // Parts not read: "line 12: if [ -f x ] (its test needs running)".
  ShellNotes not_read;
};

// `label` names the input in errors (a syntax error: "line 4: unclosed \" quote").
ShellScript read_shell_script(std::string_view text, const std::string& label);

}  // namespace shardplan
