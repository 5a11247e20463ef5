#include "runtime/config/dsrank_arguments.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(const std::vector<std::string>& args) {
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
  EXPECT_THAT(ErrorOf({"job.cfg", "--override"}), HasSubstr("--override needs a value"));
  EXPECT_THAT(ErrorOf({"job.cfg", "--exit_at_step", "ten"}), HasSubstr("--exit_at_step 'ten': needs a step number"));
  EXPECT_THAT(ErrorOf({"job.cfg", "--device", "tpu"}), HasSubstr("--device 'tpu': expected auto, cpu or cuda"));
  EXPECT_THAT(ErrorOf({"job.cfg", "--cuda_memory_limit_gb", "0"}), HasSubstr("positive number of GiB"));
  // Names match exactly: no prefix of a flag is taken for it.
  EXPECT_THAT(ErrorOf({"job.cfg", "--overrides", "a=1"}), HasSubstr("unknown argument '--overrides'"));
  EXPECT_THAT(ErrorOf({"job.cfg", "other.cfg"}), HasSubstr("unknown argument 'other.cfg'"));
  EXPECT_THAT(ErrorOf({"--loss_log", "x"}), HasSubstr("missing the job file"));
}

}  // namespace
}  // namespace dslaunch::runtime
