#include "common/flag_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/version.h"

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::string device = "auto";
  std::string log;
  int64_t steps = 10;
  double limit = 0;
  bool verbose = false;
  std::vector<std::string> overrides;
};

FlagTable TableFor(Parsed& p) {
  FlagTable table("dstool", "dstool FILE [flags]");
  table.String("--device", &p.device, "", "where to run", {"auto", "cpu", "cuda"})
      .String("--log", &p.log, "PATH", "where to log")
      .Int("--steps", &p.steps, "N", "how many steps", {1, 100})
      .Double("--limit_gb", &p.limit, "G", "memory limit", {0, 1024, /*min_exclusive=*/true})
      .Bool("--verbose", &p.verbose, "say more")
      .Repeated("--override", &p.overrides, "KEY=VALUE", "change a key")
      .Positional("FILE", "the job file");
  return table;
}

absl::Status ParseInto(Parsed& p, std::vector<std::string> args) {
  FlagTable table = TableFor(p);
  return table.Parse(args);
}

std::string ErrorOf(std::vector<std::string> args) {
  Parsed p;
  absl::Status status = ParseInto(p, std::move(args));
  EXPECT_FALSE(status.ok());
  return std::string(status.message());
}

TEST(FlagTable, BothValueSyntaxesAndPositionals) {
  Parsed p;
  FlagTable table = TableFor(p);
  ASSERT_TRUE(table.Parse({"--device", "cpu", "job.cfg", "--steps=7", "--log=/tmp/x", "--limit_gb",
                           "1.5", "--override", "a=1", "--override=b=2", "--", "--not-a-flag"})
                  .ok());
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.steps, 7);
  EXPECT_EQ(p.log, "/tmp/x");
  EXPECT_DOUBLE_EQ(p.limit, 1.5);
  EXPECT_THAT(p.overrides, ElementsAre("a=1", "b=2"));
  EXPECT_THAT(table.positionals(), ElementsAre("job.cfg", "--not-a-flag"));
}

TEST(FlagTable, DefaultsStayWhenNotGiven) {
  Parsed p;
  ASSERT_TRUE(ParseInto(p, {"job.cfg"}).ok());
  EXPECT_EQ(p.device, "auto");
  EXPECT_EQ(p.steps, 10);
  EXPECT_FALSE(p.verbose);
}

TEST(FlagTable, ExactNamesOnlyAPrefixIsRefusedWithASuggestion) {
  EXPECT_EQ(ErrorOf({"--devicex", "cpu"}), "unknown flag --devicex; did you mean --device?");
  EXPECT_EQ(ErrorOf({"--devic=cpu"}), "unknown flag --devic; did you mean --device?");
  EXPECT_EQ(ErrorOf({"-steps", "3"}), "unknown flag -steps; did you mean --steps?");
  EXPECT_EQ(ErrorOf({"--nproc_per_node", "3"}),
            "unknown flag --nproc_per_node; dstool --help lists the flags");
}

TEST(FlagTable, MissingValueNamesTheFlag) {
  EXPECT_EQ(ErrorOf({"job.cfg", "--log"}), "--log needs a value (PATH)");
  EXPECT_EQ(ErrorOf({"--log", "--steps", "3"}), "--log needs a value (PATH)");
  EXPECT_EQ(ErrorOf({"--log="}), "--log needs a non-empty value");
}

TEST(FlagTable, BoundsAndKinds) {
  EXPECT_EQ(ErrorOf({"--steps", "0"}), "--steps '0': must be in 1..100");
  EXPECT_EQ(ErrorOf({"--steps", "ten"}), "--steps 'ten': not an integer");
  EXPECT_EQ(ErrorOf({"--steps", "+3"}), "--steps '+3': not an integer");
  EXPECT_EQ(ErrorOf({"--steps", "99999999999999999999"}), "--steps '99999999999999999999': must be in 1..100");
  EXPECT_EQ(ErrorOf({"--limit_gb", "0"}), "--limit_gb '0': must be in (0, 1024]");
  EXPECT_EQ(ErrorOf({"--limit_gb", "x"}), "--limit_gb 'x': not a number");
  EXPECT_EQ(ErrorOf({"--device", "cdua"}),
            "--device 'cdua': expected one of auto, cpu, cuda (did you mean cuda?)");
}

TEST(FlagTable, BoolForms) {
  for (const auto& [args, expected] :
       std::vector<std::pair<std::vector<std::string>, bool>>{{{"--verbose"}, true},
                                                              {{"--verbose=true"}, true},
                                                              {{"--verbose=false"}, false},
                                                              {{"--verbose=FALSE"}, false},
                                                              {{}, false}}) {
    Parsed p;
    ASSERT_TRUE(ParseInto(p, args).ok());
    EXPECT_EQ(p.verbose, expected);
  }
  EXPECT_EQ(ErrorOf({"--verbose=yes"}), "--verbose 'yes': expected true or false");
  // A bool never swallows the next argument.
  Parsed p;
  FlagTable table = TableFor(p);
  ASSERT_TRUE(table.Parse({"--verbose", "job.cfg"}).ok());
  EXPECT_THAT(table.positionals(), ElementsAre("job.cfg"));
}

TEST(FlagTable, HelpListsEveryFlagWithItsDefault) {
  Parsed p;
  FlagTable table = TableFor(p);
  ASSERT_TRUE(table.Parse({"--help", "--no-such-flag"}).ok());  // --help ends parsing
  EXPECT_TRUE(table.help_requested());
  const std::string help = table.Help();
  EXPECT_THAT(help, HasSubstr("usage: dstool FILE [flags]"));
  for (const char* expected : {"--device auto|cpu|cuda", "--log PATH", "--steps N", "--limit_gb G",
                               "--verbose", "--override KEY=VALUE", "--help", "--version", "FILE",
                               "(default 10) [1..100]", "(default auto)", "change a key (repeatable)"}) {
    EXPECT_THAT(help, HasSubstr(expected));
  }
}

TEST(FlagTable, VersionIsTheOneVersionLine) {
  Parsed p;
  FlagTable table = TableFor(p);
  ASSERT_TRUE(table.Parse({"--version"}).ok());
  EXPECT_TRUE(table.version_requested());
  EXPECT_EQ(table.Version(), VersionLine("dstool"));
  EXPECT_THAT(table.Version(), HasSubstr(kDslaunchVersion));
}

}  // namespace
}  // namespace dslaunch
