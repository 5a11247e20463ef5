#include "runtime/config/config_schema.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"

namespace dslaunch::runtime::config_internal {
namespace {

using ::testing::HasSubstr;

TEST(EditDistance, CountsTranspositionsAsOneEdit) {
  EXPECT_EQ(EditDistance("stage", "stage"), 0);
  EXPECT_EQ(EditDistance("stgae", "stage"), 1);
  EXPECT_EQ(EditDistance("zero_optimizaton", "zero_optimization"), 1);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("Stage", "stage"), 0);  // case slips cost nothing
}

TEST(NearestName, SuggestsOnlyCloseNames) {
  std::vector<std::string> keys = {"fp16", "bf16", "zero_optimization", "optimizer"};
  EXPECT_EQ(NearestName("zero_optimizaton", keys), "zero_optimization");
  EXPECT_EQ(NearestName("optimiser", keys), "optimizer");
  EXPECT_EQ(NearestName("bf61", keys), "bf16");
  EXPECT_EQ(NearestName("learning_rate", keys), "");
  EXPECT_EQ(NearestName("z", {"x", "y"}), "");  // one letter is no basis for a guess
}

TEST(ParseIntegerText, AcceptsIntegersAndIntegralFloats) {
  int64_t value = 0;
  EXPECT_TRUE(ParseIntegerText("42", &value));
  EXPECT_EQ(value, 42);
  EXPECT_TRUE(ParseIntegerText("-3", &value));
  EXPECT_EQ(value, -3);
  EXPECT_TRUE(ParseIntegerText("+4", &value));
  EXPECT_EQ(value, 4);
  EXPECT_TRUE(ParseIntegerText("5e8", &value));  // how DeepSpeed users write bucket sizes
  EXPECT_EQ(value, 500000000);
  EXPECT_TRUE(ParseIntegerText("2.0", &value));
  EXPECT_EQ(value, 2);
  EXPECT_FALSE(ParseIntegerText("1.5", &value));
  EXPECT_FALSE(ParseIntegerText("two", &value));
  EXPECT_FALSE(ParseIntegerText("", &value));
  EXPECT_FALSE(ParseIntegerText("1e30", &value));
  EXPECT_FALSE(ParseIntegerText("3 ", &value));
}

TEST(ParseNumberText, AcceptsFiniteNumbersOnly) {
  double value = 0;
  EXPECT_TRUE(ParseNumberText("1e-3", &value));
  EXPECT_DOUBLE_EQ(value, 1e-3);
  EXPECT_TRUE(ParseNumberText("0.9", &value));
  EXPECT_DOUBLE_EQ(value, 0.9);
  EXPECT_TRUE(ParseNumberText("7", &value));
  EXPECT_FALSE(ParseNumberText(".inf", &value));
  EXPECT_FALSE(ParseNumberText("inf", &value));
  EXPECT_FALSE(ParseNumberText("nan", &value));
  EXPECT_FALSE(ParseNumberText("1e-3x", &value));
}

TEST(ParseBoolText, AcceptsTrueAndFalseOnly) {
  bool value = false;
  EXPECT_TRUE(ParseBoolText("true", &value));
  EXPECT_TRUE(value);
  EXPECT_TRUE(ParseBoolText("False", &value));
  EXPECT_FALSE(value);
  EXPECT_FALSE(ParseBoolText("yes", &value));  // YAML 1.1's yes/no/on/off read too easily as typos
  EXPECT_FALSE(ParseBoolText("1", &value));
}

TEST(FormatNumber, WritesTheShortestExactText) {
  EXPECT_EQ(FormatNumber(0.001), "0.001");
  EXPECT_EQ(FormatNumber(1e-8), "1e-08");
  EXPECT_EQ(FormatNumber(0.9), "0.9");
  EXPECT_EQ(FormatNumber(500000000), "500000000");
  EXPECT_EQ(FormatNumber(-1), "-1");
}

TEST(Location, NamesFileLineOrTheOverride) {
  TreeSource source{"ds.json", "", {{"zero_optimization.stage", "zero_optimization.stage=1"}}};
  YAML::Node node = YAML::Load("a:\n  b: 1\n");
  EXPECT_EQ(Location(source, "a.b", node["a"]["b"].Mark()), "ds.json:2");
  EXPECT_EQ(Location(source, "a", YAML::Mark::null_mark()), "ds.json");
  EXPECT_EQ(Location(source, "zero_optimization.stage", node.Mark()),
            "--override 'zero_optimization.stage=1'");
  // A section the override created on its way has no mark.
  EXPECT_EQ(Location(source, "zero_optimization", YAML::Mark::null_mark()),
            "--override 'zero_optimization.stage=1'");
  // A section that was in the file keeps its line.
  YAML::Mark first_line;
  first_line.line = 0;
  EXPECT_EQ(Location(source, "zero_optimization", first_line), "ds.json:1");
}

TEST(SchemaWalker, WritesValuesAndCollectsEveryProblem) {
  int stage = 0;
  bool enabled = false;
  std::string kind = "x";
  SchemaWalker walker({Key("zero.stage", &stage).OneOf({"0", "1", "2", "3"}),
                       Key("zero.enabled", &enabled), Key("kind", &kind).OneOf({"x", "y"})});
  Problems problems;
  TreeSource source{"f.yaml", "", {}};
  WalkResult walk = walker.Walk(YAML::Load("zero:\n  stage: 2\n  enabled: yes\nkidn: y\n"
                                           "kind: z\n"),
                                source, &problems);
  EXPECT_EQ(stage, 2);
  EXPECT_TRUE(walk.Has("zero.stage"));
  EXPECT_TRUE(walk.invalid.count("zero.enabled"));
  ASSERT_EQ(problems.lines().size(), 3u) << problems.ToStatus();
  EXPECT_EQ(problems.lines()[0], "f.yaml:3: zero.enabled: expected true or false, got 'yes'");
  EXPECT_EQ(problems.lines()[1], "f.yaml:4: unknown key 'kidn' (did you mean 'kind'?)");
  EXPECT_EQ(problems.lines()[2], "f.yaml:5: kind: 'z' is not one of x, y");
  EXPECT_EQ(problems.ToStatus().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseOverride, SplitsPathAndValue) {
  auto parsed = ParseOverride("ds_config.zero_optimization.stage=1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->path, "ds_config.zero_optimization.stage");
  EXPECT_EQ(parsed->value, "1");
  parsed = ParseOverride("train.betas=[0.9, 0.95]");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->value, "[0.9, 0.95]");
  parsed = ParseOverride("data.prepared=a=b");  // only the first '=' splits
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->value, "a=b");
}

TEST(ParseOverride, RefusesMalformedText) {
  auto parsed = ParseOverride("train.steps");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("'train.steps': expected key.path=value"));
  parsed = ParseOverride("train..steps=1");
  EXPECT_THAT(parsed.status().message(), HasSubstr("empty part"));
  parsed = ParseOverride("=1");
  EXPECT_THAT(parsed.status().message(), HasSubstr("empty part"));
  parsed = ParseOverride("train.betas=[0.9, 0.95");
  EXPECT_THAT(parsed.status().message(), HasSubstr("not valid YAML"));
}

}  // namespace
}  // namespace dslaunch::runtime::config_internal
