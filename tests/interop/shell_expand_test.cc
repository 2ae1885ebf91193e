// Bash's expansions of one word, checked against what bash 5 prints for the same word
// (each expected value below was run through `printf '<%s>' WORD`).
#include "interop/internal/shell_expand.h"

#include <gtest/gtest.h>

#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

using Words = std::vector<std::string>;

class ShellExpandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    variables_.assign("ARGS", {"--num-layers 24  --hidden-size\t1024"}, false, false);
    variables_.assign("EMPTY", {""}, false, false);
    variables_.assign("ARR", {"--a 1", "", "--b"}, true, false);
    variables_.assign("NONE", {}, true, false);
    variables_.assign("GPUS", {"8"}, false, false);
    variables_.assign("NODES", {"2"}, false, false);
  }
  Words words(std::string_view raw) { return expander_.expand(raw, ShellSplit::words, 1).fields; }
  std::string single(std::string_view raw) {
    return expander_.expand(raw, ShellSplit::single, 1).fields.front();
  }
  bool resolved(std::string_view raw) {
    return expander_.expand(raw, ShellSplit::words, 1).resolved;
  }

  ShellVariables variables_;
  ShellBudget budget_{"script"};
  std::vector<std::string> not_run_;
  ShellExpander expander_{variables_, budget_, not_run_};
};

TEST_F(ShellExpandTest, UnquotedExpansionsSplitQuotedOnesDoNot) {
  EXPECT_EQ(words("$ARGS"), (Words{"--num-layers", "24", "--hidden-size", "1024"}));
  EXPECT_EQ(words("\"$ARGS\""), (Words{"--num-layers 24  --hidden-size\t1024"}));
  EXPECT_EQ(words("x${ARGS}y"), (Words{"x--num-layers", "24", "--hidden-size", "1024y"}));
  EXPECT_EQ(words("$EMPTY"), Words{});        // an empty unquoted expansion is no word
  EXPECT_EQ(words("\"$EMPTY\""), Words{""});  // a quoted one is an empty word
  EXPECT_EQ(words("''"), Words{""});
  EXPECT_EQ(words("'$ARGS'"), Words{"$ARGS"});
  EXPECT_EQ(words("\\$ARGS"), Words{"$ARGS"});
  EXPECT_EQ(words("\"a\\$b\\c\""), Words{"a$b\\c"});
  EXPECT_EQ(single("--x $ARGS"), "--x --num-layers 24  --hidden-size\t1024");
}

TEST_F(ShellExpandTest, Arrays) {
  EXPECT_EQ(words("\"${ARR[@]}\""), (Words{"--a 1", "", "--b"}));
  EXPECT_EQ(words("${ARR[@]}"), (Words{"--a", "1", "--b"}));
  EXPECT_EQ(words("\"${ARR[*]}\""), (Words{"--a 1  --b"}));
  EXPECT_EQ(words("\"x${ARR[@]}y\""), (Words{"x--a 1", "", "--by"}));
  EXPECT_EQ(words("\"${NONE[@]}\""), Words{});    // no element, no word, even in quotes
  EXPECT_EQ(words("$ARR"), (Words{"--a", "1"}));  // element 0
  EXPECT_EQ(words("${ARR[2]}"), Words{"--b"});
  EXPECT_EQ(words("${#ARR[@]}"), Words{"3"});
  EXPECT_EQ(words("${#GPUS}"), Words{"1"});
  EXPECT_EQ(single("${ARR[@]}"), "--a 1  --b");
}

TEST_F(ShellExpandTest, DefaultsAndAlternatives) {
  EXPECT_EQ(words("${1:-8}"), Words{"8"});  // the script is read without arguments
  EXPECT_EQ(words("${UNSET:-a b}"), (Words{"a", "b"}));
  EXPECT_EQ(words("${UNSET:-\"a b\"}"), Words{"a b"});
  EXPECT_EQ(words("\"${UNSET:-a b}\""), Words{"a b"});
  EXPECT_EQ(words("${UNSET:-${GPUS}}"), Words{"8"});
  EXPECT_EQ(words("${EMPTY:-d}"), Words{"d"});
  EXPECT_EQ(words("${EMPTY-d}"), Words{});  // set, though empty
  EXPECT_EQ(words("${GPUS:+--gpus $GPUS}"), (Words{"--gpus", "8"}));
  EXPECT_EQ(words("${UNSET:+x}"), Words{});
  EXPECT_EQ(words("${NEW:=4}"), Words{"4"});
  EXPECT_EQ(words("$NEW"), Words{"4"});  // := assigned it
}

TEST_F(ShellExpandTest, WhatNeedsRunningIsLeftAsWritten) {
  EXPECT_EQ(words("$UNSET"), Words{"$UNSET"});
  EXPECT_EQ(words("--x=${SLURM_NNODES}"), Words{"--x=${SLURM_NNODES}"});
  EXPECT_FALSE(resolved("$UNSET"));
  EXPECT_FALSE(resolved("$1"));
  EXPECT_EQ(words("$(nproc --all)"), Words{"$(nproc --all)"});
  EXPECT_EQ(words("\"$(dirname \"$P\")\"/x"), Words{"$(dirname \"$P\")/x"});
  EXPECT_EQ(words("`date`"), Words{"`date`"});
  EXPECT_EQ(words("${GPUS%0}"), Words{"${GPUS%0}"});  // a form not expanded here
  EXPECT_TRUE(resolved("$GPUS"));
  // Substitutions are listed once each; unset variables are not (they may be the user's).
  EXPECT_EQ(not_run_, (Words{"$(nproc --all)", "$(dirname \"$P\")", "`date`", "${GPUS%0}"}));
}

TEST_F(ShellExpandTest, Arithmetic) {
  EXPECT_EQ(words("$(($GPUS*$NODES))"), Words{"16"});
  EXPECT_EQ(words("$((GPUS*NODES))"), Words{"16"});  // names read as variables
  EXPECT_EQ(words("$(( (${GPUS} + 2) / 3 - -1 ))"), Words{"4"});
  EXPECT_EQ(words("$((7 % 4 + 010 + 0x10))"), Words{"27"});  // 010 is octal
  EXPECT_EQ(words("$((GPUS / 0))"), Words{"$((GPUS / 0))"});
  EXPECT_EQ(words("$((9223372036854775807 + 1))"), Words{"$((9223372036854775807 + 1))"});
  EXPECT_EQ(words("$((UNSET * 2))"), Words{"$((UNSET * 2))"});
  EXPECT_EQ(words("$((GPUS ** 2))"), Words{"$((GPUS ** 2))"});
  EXPECT_FALSE(resolved("$((GPUS / 0))"));
}

TEST(ShellArithmetic, ChecksEveryStep) {
  ShellVariables variables;
  variables.assign("SELF", {"SELF + 1"}, false, false);
  EXPECT_EQ(shell_arithmetic("2 * (3 + 4)", variables), 14);
  EXPECT_EQ(shell_arithmetic("-9223372036854775807 - 1", variables), INT64_MIN);
  EXPECT_EQ(shell_arithmetic("-9223372036854775807 - 2", variables), std::nullopt);
  EXPECT_EQ(shell_arithmetic("(-9223372036854775807 - 1) / -1", variables), std::nullopt);
  EXPECT_EQ(shell_arithmetic("4294967296 * 4294967296", variables), std::nullopt);
  EXPECT_EQ(shell_arithmetic("SELF", variables), std::nullopt);  // refers to itself
  EXPECT_EQ(shell_arithmetic("1 2", variables), std::nullopt);
  EXPECT_EQ(shell_arithmetic(std::string(100000, '(') + "1" + std::string(100000, ')'), variables),
            std::nullopt);  // nested past the bound, not recursed into
}

// A1="A0+A0+...": each name is evaluated again where it is used, eight times more work a
// level; past 100 000 names read the expression is left unevaluated (8^12 took minutes).
TEST(ShellArithmetic, NamesThatMultiplyTheWorkStopAtABudget) {
  ShellVariables variables;
  variables.assign("A0", {"1"}, false, false);
  for (int level = 1; level <= 12; ++level) {
    const std::string below = "A" + std::to_string(level - 1);
    std::string sum = below;
    for (int i = 1; i < 8; ++i) sum += "+" + below;
    variables.assign("A" + std::to_string(level), {sum}, false, false);
  }
  EXPECT_EQ(shell_arithmetic("A4", variables), 4096);  // 8^4: within the budget
  EXPECT_EQ(shell_arithmetic("A12", variables), std::nullopt);
}

TEST(ShellBudget, ADoublingVariableStopsAtTheBudget) {
  ShellVariables variables;
  variables.assign("X", {std::string(1 << 20, 'x')}, false, false);
  ShellBudget budget("script");
  std::vector<std::string> not_run;
  ShellExpander expander(variables, budget, not_run);
  testing::expect_input_error(
      [&] {
        for (int i = 0; i < 100; ++i) {
          const ShellExpansion e = expander.expand("$X$X", ShellSplit::single, i + 1);
          variables.assign("X", e.fields, false, false);
        }
      },
      "line 6", "expand to more than 64 MiB", "script");
}

}  // namespace
}  // namespace shardplan
