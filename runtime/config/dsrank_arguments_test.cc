#include "runtime/config/dsrank_arguments.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ArgumentsErrorOf(const std::vector<std::string>& args) {
  auto parsed = ParseDsrankArguments(args);
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(DsrankArguments, TakesEveryFlagInBothSpellings) {
  auto parsed = ParseDsrankArguments({"--override", "train.steps=2", "job.cfg", "--override=model.layers=1",
                                      "--loss_log", "/tmp/l.tsv", "--device=cpu", "--exit_at_step", "8",
                                      "--hang_at_step=10", "--hang_rank", "1", "--cuda_memory_limit_gb", "1.5",
                                      "--local_rank=3"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->job_file, "job.cfg");
  EXPECT_THAT(parsed->overrides, ElementsAre("train.steps=2", "model.layers=1"));
  EXPECT_EQ(parsed->loss_log, "/tmp/l.tsv");
  EXPECT_EQ(parsed->device, "cpu");
  EXPECT_EQ(parsed->exit_at_step, 8);
  EXPECT_EQ(parsed->hang_at_step, 10);
  EXPECT_EQ(parsed->hang_rank, 1);
  EXPECT_DOUBLE_EQ(parsed->cuda_memory_limit_gb, 1.5);
}

TEST(DsrankArguments, NamesWhatIsWrong) {
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--override"}), HasSubstr("--override needs a value"));
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--exit_at_step", "ten"}), HasSubstr("--exit_at_step 'ten': not an integer"));
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--device", "tpu"}), HasSubstr("--device 'tpu': expected one of auto, cpu, cuda"));
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--cuda_memory_limit_gb", "0"}), HasSubstr("--cuda_memory_limit_gb '0': must be in (0, 65536]"));
  // Names match exactly: no prefix of a flag is taken for it.
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--overrides", "a=1"}), HasSubstr("unknown flag --overrides; did you mean --override?"));
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "other.cfg"}), HasSubstr("unexpected argument 'other.cfg' (the job file is job.cfg)"));
  EXPECT_THAT(ArgumentsErrorOf({"--loss_log", "x"}), HasSubstr("missing the job file"));
  // Names match exactly: a longer or shorter spelling is refused with the nearest name.
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--devicex", "cpu"}), HasSubstr("unknown flag --devicex; did you mean --device?"));
  EXPECT_THAT(ArgumentsErrorOf({"job.cfg", "--devic=cpu"}), HasSubstr("unknown flag --devic; did you mean --device?"));
}

TEST(DsrankArguments, HelpAndVersionNeedNoJobFile) {
  auto help = ParseDsrankArguments({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  for (const char* flag : {"--override", "--loss_log", "--device", "--cuda_memory_limit_gb", "--exit_at_step",
                           "--hang_at_step", "--hang_rank", "--local_rank", "--version", "JOB.cfg"}) {
    EXPECT_THAT(help->print, HasSubstr(flag));
  }
  auto version = ParseDsrankArguments({"--version"});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_THAT(version->print, HasSubstr("dsrank 0."));
}

}  // namespace
}  // namespace dslaunch::runtime
