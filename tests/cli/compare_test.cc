// `shardplan compare`: predicted against measured timelines, and timelines of different
// plans refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

std::string timeline(const std::vector<std::string>& job, const std::string& name) {
  const std::string path = write_temp_file(name, "");
  std::vector<std::string> args = {"simulate", "--timeline-out", path};
  args.insert(args.end(), job.begin(), job.end());
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

TEST(CompareCommand, SumsOpTimePerKindAndTheStep) {
  const std::string a = timeline({"--model", "tiny", "--gpus", "2"}, "a.json");
  // The "measured" side: a copy with every op and the step stretched by 2.
  std::ifstream in(a);
  nlohmann::json j = nlohmann::json::parse(in);
  j["source"] = "measured";
  for (auto& op : j["ops"]) {
    op["start"] = op["start"].get<double>() * 2;
    op["end"] = op["end"].get<double>() * 2;
  }
  j["summary"]["step_seconds"] = j["summary"]["step_seconds"].get<double>() * 2;
  const std::string b = write_temp_file("b.json", j.dump());
  const CommandResult r = run_shardplan({"compare", a, b, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json c = stdout_json(r);
  EXPECT_NEAR(
      c["step"]["measured_seconds"].get<double>() / c["step"]["predicted_seconds"].get<double>(),
      2.0, 1e-9);
  for (const auto& [kind, t] : c["by_kind"].items()) {
    if (t["predicted_seconds"].get<double>() > 0) {
      EXPECT_NEAR(t["measured_seconds"].get<double>() / t["predicted_seconds"].get<double>(), 2.0,
                  1e-9)
          << kind;
    }
  }
  const CommandResult text = run_shardplan({"compare", a, b});
  EXPECT_THAT(text.out, HasSubstr("-50.0 %"));
}

// An op of 1e308 seconds was compared as valid: every time in a timeline is a time within
// a step of at most a day.
TEST(CompareCommand, RefusesTimesNoStepHas) {
  const std::string a = timeline({"--model", "tiny", "--gpus", "2"}, "ok.json");
  std::ifstream in(a);
  nlohmann::json j = nlohmann::json::parse(in);
  j["ops"][0]["end"] = 1e308;
  const std::string b = write_temp_file("absurd_timeline.json", j.dump());
  const CommandResult r = run_shardplan({"compare", a, b});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("absurd_timeline.json: /ops/0/end: 1e+308 s is not a time within "
                               "a step: must be in [0, 86400] (a day"));
}

TEST(CompareCommand, RefusesTimelinesOfDifferentPlans) {
  const std::string a = timeline({"--model", "tiny", "--gpus", "2"}, "p2.json");
  const std::string b =
      timeline({"--model", "tiny", "--gpus", "2", "--set", "grad_accum=2"}, "p2ga.json");
  const CommandResult r = run_shardplan({"compare", a, b});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("not the same plan"));
  const std::string bad = write_temp_file("bad_timeline.json", R"({"version": 7})");
  const CommandResult v = run_shardplan({"compare", a, bad});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_THAT(v.err, HasSubstr("bad_timeline.json"));
}

}  // namespace
}  // namespace shardplan::testing
