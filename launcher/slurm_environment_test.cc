#include "launcher/slurm_environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SlurmHostlist, ExpandsSlurmsSyntax) {
  auto hosts = ExpandSlurmHostlist("gpu[01-03,07],login2", "SLURM_JOB_NODELIST");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("gpu01", "gpu02", "gpu03", "gpu07", "login2"));
  hosts = ExpandSlurmHostlist("r[1-2]n[8-9]-ib", "SLURM_JOB_NODELIST");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("r1n8-ib", "r1n9-ib", "r2n8-ib", "r2n9-ib"));
  hosts = ExpandSlurmHostlist("10.0.0.[2-3]", "SLURM_JOB_NODELIST");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("10.0.0.2", "10.0.0.3"));
  hosts = ExpandSlurmHostlist("node[8-10]", "SLURM_JOB_NODELIST");
  ASSERT_TRUE(hosts.ok());
  EXPECT_THAT(*hosts, ElementsAre("node8", "node9", "node10"));
}

TEST(SlurmHostlist, RefusesWhatIsNoHostlistNamingTheVariable) {
  for (const char* bad : {"", "a,,b", "gpu[01-03", "gpu]1", "gpu[3-1]", "gpu[a-b]", "gpu[-1]"}) {
    auto hosts = ExpandSlurmHostlist(bad, "SLURM_JOB_NODELIST");
    ASSERT_FALSE(hosts.ok()) << bad;
    EXPECT_THAT(std::string(hosts.status().message()), HasSubstr("SLURM_JOB_NODELIST='")) << bad;
  }
}

TEST(SlurmGpus, ReadsEitherVariable) {
  EXPECT_EQ(*SlurmGpusPerNode("4", "gpu:8"), 4);  // the node's own count first
  EXPECT_EQ(*SlurmGpusPerNode("", "gpu:h100:8"), 8);
  EXPECT_EQ(*SlurmGpusPerNode("", "2"), 2);
  EXPECT_EQ(*SlurmGpusPerNode("", "gpu:a100:2,gpu:v100:1"), 3);
  EXPECT_EQ(*SlurmGpusPerNode("", ""), 0);
  EXPECT_FALSE(SlurmGpusPerNode("", "gpu:many").ok());
  EXPECT_FALSE(SlurmGpusPerNode("x", "").ok());
}

}  // namespace
}  // namespace dslaunch
