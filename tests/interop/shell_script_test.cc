// A script read as bash would run it: which commands run with which words, which branch an
// `if` takes, and what is left unread (and said so) because deciding it needs running.
#include "interop/internal/shell_script.h"

#include <gtest/gtest.h>

#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

using Words = std::vector<std::string>;

std::vector<Words> commands(const ShellScript& script) {
  std::vector<Words> out;
  for (const ShellCommand& c : script.commands) out.push_back(c.words);
  return out;
}

std::vector<Words> run(std::string_view text) {
  return commands(read_shell_script(text, "script"));
}

std::string value(const ShellScript& script, std::string_view name) {
  const ShellVariable* v = script.variables.find(name);
  return v == nullptr || v->values.empty() ? "<unset>" : v->values.front();
}

TEST(ShellScript, AssignmentsAndExports) {
  const ShellScript s = read_shell_script(
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\nA=1 B=$A\nC=\"$B $B\"; D=x\\ y\n"
      "GPUS=${GPUS:-8}\nN=$((GPUS * 2))\nL=(--x \"$C\")\nL+=(--y)\nS=a; S+=b\nunset D\n"
      "local Q=1 R\n",
      "script");
  EXPECT_EQ(value(s, "B"), "1");  // assignments on one line apply left to right
  EXPECT_EQ(value(s, "C"), "1 1");
  EXPECT_EQ(value(s, "N"), "16");
  EXPECT_EQ(value(s, "S"), "ab");
  EXPECT_EQ(value(s, "D"), "<unset>");
  EXPECT_EQ(value(s, "Q"), "1");
  EXPECT_EQ(s.variables.find("L")->values, (Words{"--x", "1 1", "--y"}));
  EXPECT_TRUE(s.variables.find("CUDA_DEVICE_MAX_CONNECTIONS")->exported);
  EXPECT_TRUE(s.commands.empty());
}

TEST(ShellScript, CommandsGetTheirExpandedWords) {
  const ShellScript s = read_shell_script(
      "GPT_ARGS=\"--num-layers 24 \\\n  --hidden-size 1024\"\n"
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun $GPT_ARGS \"$GPT_ARGS\" \\\n"
      "  | tee log.txt 2>&1\n",
      "script");
  ASSERT_EQ(s.commands.size(), 2u);
  EXPECT_EQ(s.commands[0].words, (Words{"torchrun", "--num-layers", "24", "--hidden-size", "1024",
                                        "--num-layers 24   --hidden-size 1024"}));
  EXPECT_EQ(s.commands[0].environment.front().first, "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(s.commands[1].words, (Words{"tee", "log.txt"}));
  // A command's own assignments do not stay in the shell.
  EXPECT_EQ(value(s, "PYTORCH_CUDA_ALLOC_CONF"), "<unset>");
}

TEST(ShellScript, IfTakesTheBranchItsTestPicks) {
  EXPECT_EQ(run("X=1\nif [ \"$X\" = 1 ]; then echo a; elif true; then echo b; else echo c; fi"),
            (std::vector<Words>{{"echo", "a"}}));
  EXPECT_EQ(
      run("X=2\nif [[ $X -gt 3 ]] || [[ -n \"$X\" && $X == 2 ]]; then echo a; else echo b; fi"),
      (std::vector<Words>{{"echo", "a"}}));
  // $Y is not known here (it may be in the environment): neither branch is read.
  EXPECT_EQ(run("X=2\nif [[ $X -gt 3 ]] || [[ -z \"$Y\" ]]; then echo a; else echo b; fi"),
            std::vector<Words>{});
  EXPECT_EQ(run("X=fp8\nif [[ \"$X\" == fp* ]]; then A=(--fp8); fi\necho \"${A[@]}\""),
            (std::vector<Words>{{"echo", "--fp8"}}));
  EXPECT_EQ(run("if [ 3 -lt 10 -a ! -n \"\" ]; then echo yes; fi"),
            (std::vector<Words>{{"echo", "yes"}}));
  EXPECT_EQ(run("N=4\ncase $N in 1|2) echo small;; [3-9]) echo mid;; *) echo big;; esac"),
            (std::vector<Words>{{"echo", "mid"}}));
}

TEST(ShellScript, WhatNeedsRunningIsNotReadAndSaidSo) {
  const ShellScript s = read_shell_script(
      "if [ -f data.bin ]; then A=1; else A=2; fi\n"
      "if grep -q x f; then B=1; fi\n"
      "for i in 1 2; do C=$i; done\n"
      "while [[ $# -gt 0 ]]; do shift; done\n"
      "[ -d /x ] && D=1\n"
      "source env.sh\n"
      "f() { E=1; }\nf\n",
      "script");
  for (const char* name : {"A", "B", "C", "D", "E"}) EXPECT_EQ(value(s, name), "<unset>") << name;
  EXPECT_EQ(s.not_read.entries,
            (Words{"line 1: if [ -f data.bin ] (its test needs running to decide; no branch read)",
                   "line 2: if grep -q x f (its test needs running to decide; no branch read)",
                   "line 3: for i in 1 2 (a loop; its body is not read)",
                   "line 4: while [[ $# -gt 0 ]] (a loop; its body is not read)",
                   "line 5: D=1 (it follows a test that needs running to decide)",
                   "line 6: source env.sh (another file is not read)",
                   "line 8: f (a function of the script; its body is not read)"}));
  // The grep in the test runs (it is a command); nothing else does.
  EXPECT_EQ(commands(s), (std::vector<Words>{{"grep", "-q", "x", "f"}}));
}

TEST(ShellScript, ExitEvalSubshellsAndFailures) {
  // Commands are taken to succeed: `|| exit 1` does not exit; a plain `exit` does.
  EXPECT_EQ(run("cd dir || exit 1\necho a\nexit 0\necho b"),
            (std::vector<Words>{{"cd", "dir"}, {"echo", "a"}}));
  EXPECT_EQ(run("CMD=\"torchrun --nnodes 2 'a b'\"\neval $CMD"),
            (std::vector<Words>{{"torchrun", "--nnodes", "2", "a b"}}));
  EXPECT_EQ(run("X=1; (X=2; exit); echo $X"), (std::vector<Words>{{"echo", "1"}}));
  EXPECT_EQ(run("true && echo a; false && echo b; false || echo c"),
            (std::vector<Words>{{"echo", "a"}, {"echo", "c"}}));
}

TEST(ShellScript, SyntaxErrorsNameTheLine) {
  using testing::expect_input_error;
  expect_input_error([] { run("if true; then\n echo a\n"); }, "line 3",
                     "'fi' expected before the end of the script", "script");
  expect_input_error([] { run("echo a\nfi"); }, "line 2", "unexpected 'fi'");
  expect_input_error([] { run("A=(1 2"); }, "line 1", "')' expected to close the array");
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "{ ";
  expect_input_error([&] { run(deep); }, "line 1", "compound commands nested more than 64 deep");
  // An eval whose text is not a script is noted, not fatal.
  const ShellScript s = read_shell_script("X=\"'\"\neval echo $X", "script");
  EXPECT_EQ(s.not_read.entries.size(), 1u);
}

TEST(ShellScript, ArrayElementsByIndex) {
  const ShellScript s = read_shell_script("A[2]=c\nA[0]=a\nA[99999]=x\nA[$i]=y\n", "script");
  EXPECT_EQ(s.variables.find("A")->values, (Words{"a", "", "c"}));
  EXPECT_EQ(s.not_read.entries,
            (Words{"line 3: A[99999]= (an index other than a number below 10000)",
                   "line 4: A[$i]= (an index other than a number below 10000)"}));
}

TEST(ShellScript, NotesAreBounded) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "if [ -f f" + std::to_string(i) + " ]; then :; fi\n";
  const ShellScript s = read_shell_script(text, "script");
  EXPECT_EQ(s.not_read.entries.size(), ShellNotes::kMaxEntries);
  EXPECT_EQ(s.not_read.more, 100 - ShellNotes::kMaxEntries);
}

}  // namespace
}  // namespace shardplan
