#include "launcher/launch_plan.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// nodes {a:[0,1,2]}, {b:[1,3]}.
LaunchPlan TwoNodePlan() {
  return BuildLaunchPlan({HostSlots{"a", {0, 1, 2}}, HostSlots{"b", {1, 3}}});
}

RankEnvironmentInputs SampleInputs() {
  RankEnvironmentInputs inputs;
  inputs.master_addr = "10.0.0.1";
  inputs.master_port = 29512;
  inputs.store_addr = "10.0.0.9:4567";
  inputs.store_token = "store-token-abc";
  inputs.job_id = "job-7";
  inputs.attempt = 2;
  inputs.max_restarts = 3;
  return inputs;
}

// ---------------------------------------------------------------------------
// BuildLaunchPlan, VisibleDevices, RanksOfNode

TEST(LaunchPlan, NumbersRanksHostByHostThenBySlot) {
  LaunchPlan plan = TwoNodePlan();
  ASSERT_EQ(plan.world_size(), 5);
  ASSERT_EQ(plan.nodes.size(), 2u);
  EXPECT_EQ(plan.nodes[0].host, "a");
  EXPECT_EQ(plan.nodes[1].host, "b");

  struct Expected {
    int node, local, local_world, device;
  };
  const Expected expected[] = {{0, 0, 3, 0}, {0, 1, 3, 1}, {0, 2, 3, 2}, {1, 0, 2, 1}, {1, 1, 2, 3}};
  for (int r = 0; r < 5; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    const RankPlacement& rank = plan.ranks[r];
    EXPECT_EQ(rank.global_rank, r);
    EXPECT_EQ(rank.node_index, expected[r].node);
    EXPECT_EQ(rank.local_rank, expected[r].local);
    EXPECT_EQ(rank.local_world_size, expected[r].local_world);
    EXPECT_EQ(rank.device, expected[r].device);
  }
}

TEST(LaunchPlan, VisibleDevicesListsEveryDeviceOfTheNodeInSlotOrder) {
  LaunchPlan plan = TwoNodePlan();
  EXPECT_EQ(plan.VisibleDevices(0), "0,1,2");
  EXPECT_EQ(plan.VisibleDevices(1), "1,3");
  LaunchPlan single = BuildLaunchPlan({HostSlots{"x", {5}}});
  EXPECT_EQ(single.VisibleDevices(0), "5");
}

TEST(LaunchPlan, RanksOfNode) {
  LaunchPlan plan = TwoNodePlan();
  EXPECT_THAT(plan.RanksOfNode(0), ElementsAre(0, 1, 2));
  EXPECT_THAT(plan.RanksOfNode(1), ElementsAre(3, 4));
  EXPECT_THAT(plan.RanksOfNode(2), IsEmpty());
}

TEST(LaunchPlan, ThreeNodesKeepHostfileOrder) {
  LaunchPlan plan = BuildLaunchPlan(
      {HostSlots{"z", {0}}, HostSlots{"m", {2, 4, 6, 7}}, HostSlots{"a", {0, 1}}});
  ASSERT_EQ(plan.world_size(), 7);
  EXPECT_THAT(plan.RanksOfNode(0), ElementsAre(0));
  EXPECT_THAT(plan.RanksOfNode(1), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(plan.RanksOfNode(2), ElementsAre(5, 6));
  EXPECT_EQ(plan.ranks[4].device, 7);
  EXPECT_EQ(plan.ranks[4].local_rank, 3);
  EXPECT_EQ(plan.ranks[4].local_world_size, 4);
  EXPECT_EQ(plan.ranks[6].node_index, 2);
  EXPECT_EQ(plan.ranks[6].local_rank, 1);
}

TEST(LaunchPlan, EmptyPlanHasNoRanks) {
  LaunchPlan plan = BuildLaunchPlan({});
  EXPECT_EQ(plan.world_size(), 0);
  EXPECT_THAT(plan.ranks, IsEmpty());
}

// ---------------------------------------------------------------------------
// BuildRankEnvironment

TEST(LaunchPlanEnvironment, SecondNodeRankHasTheFullContractWithExactValues) {
  LaunchPlan plan = TwoNodePlan();
  RankEnvironmentInputs inputs = SampleInputs();
  inputs.passthrough = {{"NCCL_DEBUG", "INFO"}};
  auto env = BuildRankEnvironment(plan, plan.ranks[4], inputs);

  const std::map<std::string, std::string> expected = {
      {"RANK", "4"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "5"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "4"},
      {"ROLE_WORLD_SIZE", "5"},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29512"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job-7"},
      {"CROSS_RANK", "1"},
      {"CROSS_SIZE", "2"},
      {"LOCAL_SIZE", "2"},
      {"CUDA_VISIBLE_DEVICES", "1,3"},
      {"DSLAUNCH_JOB_ID", "job-7"},
      {"DSLAUNCH_ATTEMPT", "2"},
      {"DSLAUNCH_STORE_ADDR", "10.0.0.9:4567"},
      {"DSLAUNCH_STORE_TOKEN", "store-token-abc"},
      {"OMP_NUM_THREADS", "1"},
      {"NCCL_DEBUG", "INFO"},
  };
  for (const auto& [name, value] : expected) {
    auto it = env.find(name);
    ASSERT_NE(it, env.end()) << name << " is missing";
    EXPECT_EQ(it->second, value) << name;
  }
  // Nothing else but the contract's version.
  std::set<std::string> extra;
  for (const auto& [name, value] : env) {
    if (!expected.count(name)) extra.insert(name);
  }
  EXPECT_THAT(extra, ElementsAre("DSLAUNCH_ENV_VERSION"));
  EXPECT_EQ(env["DSLAUNCH_ENV_VERSION"], "1");
}

TEST(LaunchPlanEnvironment, FirstNodeRankValuesDifferFromTheSecondNodes) {
  LaunchPlan plan = TwoNodePlan();
  RankEnvironmentInputs inputs = SampleInputs();
  inputs.attempt = 0;
  inputs.max_restarts = 0;
  auto env = BuildRankEnvironment(plan, plan.ranks[2], inputs);
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "5");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
  EXPECT_EQ(env["LOCAL_SIZE"], "3");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env["CROSS_RANK"], "0");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["CROSS_SIZE"], "2");
  EXPECT_EQ(env["ROLE_RANK"], "2");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,1,2");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
  EXPECT_EQ(env["DSLAUNCH_ATTEMPT"], "0");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
}

TEST(LaunchPlanEnvironment, OmpNumThreadsIsAddedOnlyWhenPassthroughLacksIt) {
  LaunchPlan plan = TwoNodePlan();
  RankEnvironmentInputs inputs = SampleInputs();
  EXPECT_EQ(BuildRankEnvironment(plan, plan.ranks[0], inputs)["OMP_NUM_THREADS"], "1");
  inputs.passthrough = {{"OMP_NUM_THREADS", "8"}};
  EXPECT_EQ(BuildRankEnvironment(plan, plan.ranks[0], inputs)["OMP_NUM_THREADS"], "8");
}

TEST(LaunchPlanEnvironment, PassthroughIsKeptAndContractVariablesOverrideIt) {
  LaunchPlan plan = TwoNodePlan();
  RankEnvironmentInputs inputs = SampleInputs();
  inputs.passthrough = {{"PYTHONPATH", "/opt/lib"},
                        {"NCCL_SOCKET_IFNAME", "eth0"},
                        {"RANK", "99"},
                        {"WORLD_SIZE", "1000"},
                        {"CUDA_VISIBLE_DEVICES", "7"},
                        {"MASTER_PORT", "1"},
                        {"DSLAUNCH_STORE_TOKEN", "stale"}};
  auto env = BuildRankEnvironment(plan, plan.ranks[3], inputs);
  EXPECT_EQ(env["PYTHONPATH"], "/opt/lib");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth0");
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "5");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1,3");
  EXPECT_EQ(env["MASTER_PORT"], "29512");
  EXPECT_EQ(env["DSLAUNCH_STORE_TOKEN"], "store-token-abc");
}

// ---------------------------------------------------------------------------
// BuildRankArgv

TEST(LaunchPlanArgv, AppendsLocalRankUnlessNoLocalRank) {
  LaunchPlan plan = TwoNodePlan();
  const std::vector<std::string> program = {"python", "train.py", "--lr", "0.1"};
  EXPECT_THAT(BuildRankArgv(program, plan.ranks[4], /*no_local_rank=*/false),
              ElementsAre("python", "train.py", "--local_rank=1", "--lr", "0.1"));
  EXPECT_THAT(BuildRankArgv(program, plan.ranks[2], /*no_local_rank=*/false),
              ElementsAre("python", "train.py", "--local_rank=2", "--lr", "0.1"));
  EXPECT_THAT(BuildRankArgv(program, plan.ranks[4], /*no_local_rank=*/true),
              ElementsAre("python", "train.py", "--lr", "0.1"));
}

// ---------------------------------------------------------------------------
// SelectPassthroughVariables

TEST(LaunchPlanPassthrough, SelectsDeepspeedExportPrefixesAndOmp) {
  char nccl[] = "NCCL_DEBUG=INFO";
  char python[] = "PYTHONPATH=/opt/lib:/x";
  char ucx[] = "UCX_X=ucx";
  char mv2[] = "MV2_Y=mv2";
  char mlflow[] = "MLFLOW_Z=ml";
  char omp[] = "OMP_NUM_THREADS=4";
  char cuda_conn[] = "CUDA_DEVICE_MAX_CONNECTIONS=1";
  char home[] = "HOME=/root";
  char path[] = "PATH=/usr/bin";
  char xnccl[] = "XNCCL=no";
  char cuda_visible[] = "CUDA_VISIBLE_DEVICES=0";
  char no_equals[] = "NCCL_WITHOUT_EQUALS";
  char equals_in_value[] = "NCCL_ALGO=a=b";
  char empty_value[] = "NCCL_EMPTY=";
  char* env[] = {nccl, python, ucx,          mv2,       mlflow,          omp,         cuda_conn,
                 home, path,   xnccl,        cuda_visible, no_equals, equals_in_value, empty_value,
                 nullptr};
  auto selected = SelectPassthroughVariables(env);
  const std::map<std::string, std::string> expected = {
      {"NCCL_DEBUG", "INFO"},
      {"PYTHONPATH", "/opt/lib:/x"},
      {"UCX_X", "ucx"},
      {"MV2_Y", "mv2"},
      {"MLFLOW_Z", "ml"},
      {"OMP_NUM_THREADS", "4"},
      {"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
      {"NCCL_ALGO", "a=b"},
      {"NCCL_EMPTY", ""},
  };
  EXPECT_EQ(selected, expected);
}

TEST(LaunchPlanPassthrough, EmptyAndNullEnvironments) {
  char* empty[] = {nullptr};
  EXPECT_THAT(SelectPassthroughVariables(empty), IsEmpty());
  EXPECT_THAT(SelectPassthroughVariables(nullptr), IsEmpty());
}

// ---------------------------------------------------------------------------
// ReadDeepspeedEnvFile

class LaunchPlanEnvFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = std::filesystem::path(::testing::TempDir()) / "launch_plan_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, error);
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << content;
    return path;
  }
  std::string dir_;
};

TEST_F(LaunchPlanEnvFileTest, MissingFileIsOkAndLeavesTheMapUnchanged) {
  std::map<std::string, std::string> env = {{"KEEP", "me"}};
  absl::Status status = ReadDeepspeedEnvFile(dir_ + "/.deepspeed_env", &env);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"KEEP", "me"}}));
}

TEST_F(LaunchPlanEnvFileTest, ReadsPairsSkippingCommentsAndBlankLines) {
  std::string path = Write(".deepspeed_env",
                           "# NCCL settings\n"
                           "\n"
                           "NCCL_IB_DISABLE=1\n"
                           "   \t\n"
                           "  # indented comment\n"
                           "  NCCL_SOCKET_IFNAME=eth0  \r\n"
                           "EMPTY=\n"
                           "WITH_EQUALS=a=b\n"
                           "_UNDERSCORE9=x");
  std::map<std::string, std::string> env = {{"PRESET", "1"}};
  absl::Status status = ReadDeepspeedEnvFile(path, &env);
  ASSERT_TRUE(status.ok()) << status;
  const std::map<std::string, std::string> expected = {
      {"PRESET", "1"},           {"NCCL_IB_DISABLE", "1"}, {"NCCL_SOCKET_IFNAME", "eth0"},
      {"EMPTY", ""},             {"WITH_EQUALS", "a=b"},   {"_UNDERSCORE9", "x"},
  };
  EXPECT_EQ(env, expected);
}

TEST_F(LaunchPlanEnvFileTest, LaterValuesOverrideEarlierOnes) {
  std::string first = Write("first", "A=1\nB=1\n");
  std::string second = Write("second", "B=2\nA=0\nA=3\n");
  std::map<std::string, std::string> env = {{"A", "preset"}, {"C", "kept"}};
  ASSERT_TRUE(ReadDeepspeedEnvFile(first, &env).ok());
  EXPECT_EQ(env["A"], "1");
  EXPECT_EQ(env["B"], "1");
  ASSERT_TRUE(ReadDeepspeedEnvFile(second, &env).ok());
  EXPECT_EQ(env["A"], "3");
  EXPECT_EQ(env["B"], "2");
  EXPECT_EQ(env["C"], "kept");
}

TEST_F(LaunchPlanEnvFileTest, MalformedLinesAreErrorsNamingPathLineAndText) {
  for (const std::string bad : {"just text", "1BAD=x", "=x", "BAD-NAME=x", "export X=1"}) {
    SCOPED_TRACE(bad);
    std::string path = Write("env_bad", "# header\nGOOD=1\n" + bad + "\nLATER=2\n");
    std::map<std::string, std::string> env;
    absl::Status status = ReadDeepspeedEnvFile(path, &env);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(path + ":3"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad));
  }
}

TEST_F(LaunchPlanEnvFileTest, NonRegularFilesAreErrorsNamingThem) {
  std::map<std::string, std::string> env;
  EXPECT_EQ(ReadDeepspeedEnvFile("/dev/zero", &env).message(),
            ".deepspeed_env file /dev/zero: is a character device, not a regular file");
  EXPECT_EQ(ReadDeepspeedEnvFile(dir_, &env).message(),
            ".deepspeed_env file " + dir_ + ": is a directory, not a regular file");
  EXPECT_TRUE(env.empty());
}

TEST(BuildRankArgv, LocalRankGoesRightAfterTheScriptAsDeepSpeedPutsIt) {
  EXPECT_EQ(ScriptArgumentsStart({"python3", "-u", "train.py", "--lr", "1"}), 3u);
  EXPECT_EQ(ScriptArgumentsStart({"/usr/bin/python3.11", "-W", "ignore", "-X", "dev", "t.py", "a"}), 6u);
  EXPECT_EQ(ScriptArgumentsStart({"python", "-m", "pkg.train", "--lr", "1"}), 3u);
  EXPECT_EQ(ScriptArgumentsStart({"python", "-c", "print(1)", "x"}), 3u);
  EXPECT_EQ(ScriptArgumentsStart({"python3"}), 1u);
  EXPECT_EQ(ScriptArgumentsStart({"./train", "--lr", "1"}), 1u);
  EXPECT_EQ(ScriptArgumentsStart({"bash", "run.sh", "x"}), 1u);
}

}  // namespace
}  // namespace dslaunch
