#include "common/rank_contract.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<RankEnvironment> Parse(const std::map<std::string, std::string>& vars) {
  return ParseRankEnvironment([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RankContractTest, AnEmptyEnvironmentIsOneProcess) {
  auto env = Parse({});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->env_version, 0);
  EXPECT_FALSE(env->has_store());
  EXPECT_FALSE(env->has_agent());
  EXPECT_EQ(env->heartbeat_ms, 1000);
}

TEST(RankContractTest, ReadsEveryVariableTheLauncherAndAgentSet) {
  using namespace rank_env;
  auto env = Parse({{kRank, "5"}, {kWorldSize, "8"}, {kLocalRank, "1"}, {kLocalWorldSize, "4"},
                    {kGroupRank, "1"}, {kGroupWorldSize, "2"}, {kJobId, "job-7"}, {kAttempt, "3"},
                    {kStoreAddr, "10.0.0.1:5"}, {kStoreToken, "t"}, {kEnvVersionName, "1"},
                    {kAgentAddr, "10.0.0.2:6"}, {kRankToken, "r"}, {kHeartbeatMs, "250"},
                    {kElastic, "1"}, {kResumeTag, "global_step20"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->num_nodes, 2);
  EXPECT_EQ(env->job_id, "job-7");
  EXPECT_EQ(env->attempt, 3);
  EXPECT_EQ(env->store_addr, "10.0.0.1:5");
  EXPECT_EQ(env->store_token, "t");
  EXPECT_EQ(env->env_version, 1);
  EXPECT_TRUE(env->has_store());
  EXPECT_TRUE(env->has_agent());
  EXPECT_EQ(env->heartbeat_ms, 250);
  EXPECT_TRUE(env->elastic);
  EXPECT_EQ(env->resume_tag, "global_step20");
}

TEST(RankContractTest, NamesAMalformedVariable) {
  auto env = Parse({{"RANK", "two"}, {"WORLD_SIZE", "4"}});
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(env.status().message(), HasSubstr("RANK='two' is not an integer"));

  EXPECT_THAT(Parse({{"WORLD_SIZE", "0"}}).status().message(), HasSubstr("WORLD_SIZE='0'"));
  EXPECT_THAT(Parse({{"DSLAUNCH_ATTEMPT", "-1"}}).status().message(), HasSubstr("DSLAUNCH_ATTEMPT='-1'"));
  EXPECT_THAT(Parse({{"DSLAUNCH_ELASTIC", "yes"}}).status().message(), HasSubstr("DSLAUNCH_ELASTIC='yes'"));
}

TEST(RankContractTest, RefusesInconsistentRanks) {
  EXPECT_THAT(Parse({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).status().message(),
              HasSubstr("RANK=4 is not below WORLD_SIZE=4"));
  EXPECT_THAT(Parse({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
}

TEST(RankContractTest, AStoreAddressNeedsItsTokenJobAndAttempt) {
  auto env = Parse({{"DSLAUNCH_STORE_ADDR", "127.0.0.1:1"}, {"DSLAUNCH_STORE_TOKEN", "t"}});
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(env.status().message(), HasSubstr("DSLAUNCH_STORE_ADDR is set but DSLAUNCH_JOB_ID is not"));
}

TEST(RankContractTest, RefusesANewerContract) {
  auto env = Parse({{"DSLAUNCH_ENV_VERSION", std::to_string(rank_env::kEnvVersion + 1)}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("is newer than this program's contract"));
}

}  // namespace
}  // namespace dslaunch
