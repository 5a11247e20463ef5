#include "launcher/start_ranks_request.h"

#include <optional>

#include "common/start_ranks_environment.h"
#include "gtest/gtest.h"
#include "launcher/fake_agent_client.h"
#include "launcher/job_controller.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;

LaunchPlan OneHost(int slots) {
  std::vector<int> all;
  for (int slot = 0; slot < slots; ++slot) all.push_back(slot);
  return BuildLaunchPlan({HostSlots{"big-host", all}});
}

RankEnvironmentInputs Inputs() {
  RankEnvironmentInputs inputs;
  inputs.master_addr = "10.0.0.1";
  inputs.master_port = 29512;
  inputs.store_addr = "10.0.0.9:4567";
  inputs.store_token = "store-token-abc";
  inputs.job_id = "job-7";
  inputs.passthrough = {{"NCCL_DEBUG", "INFO"}};
  return inputs;
}

const RankProgram kProgram{{"/opt/train", "--lr", "3e-4"}, false, "/work"};

// Note [Environment once per node]: what a rank gets from its request is
// exactly the environment contract of that rank.
TEST(StartRanksRequest, EveryRankGetsItsWholeEnvironment) {
  LaunchPlan plan = BuildLaunchPlan({HostSlots{"a", {0, 1, 2}}, HostSlots{"b", {1, 3}}});
  auto requests = BuildStartRanksRequests(plan, Inputs(), kProgram);
  ASSERT_EQ(requests.size(), 2u);
  ASSERT_EQ(requests[0].ranks_size(), 3);
  ASSERT_EQ(requests[1].ranks_size(), 2);
  EXPECT_EQ(requests[1].common_env().at("CUDA_VISIBLE_DEVICES"), "1,3");
  for (const RankPlacement& placement : plan.ranks) {
    SCOPED_TRACE(testing::Message() << "rank " << placement.global_rank);
    const StartRanksRequest& request = requests[placement.node_index];
    const RankSpec& rank = request.ranks(placement.local_rank);
    EXPECT_EQ(rank.global_rank(), placement.global_rank);
    EXPECT_EQ(rank.local_rank(), placement.local_rank);
    EXPECT_EQ(rank.working_dir(), "/work");
    EXPECT_EQ(rank.argv_size(), 4);
    EXPECT_EQ(rank.argv(1), "--local_rank=" + std::to_string(placement.local_rank));
    EXPECT_EQ(StartRanksEnvironment(request, rank), BuildRankEnvironment(plan, placement, Inputs()));
    // Only what differs between ranks travels per rank.
    EXPECT_EQ(rank.env_size(), 3);
  }
}

// Before: every rank carried the whole environment, CUDA_VISIBLE_DEVICES
// listing all 1,024 slots: 5.2 MB for 1,024 ranks, past gRPC's 4 MiB.
TEST(StartRanksRequest, GrowsLinearlyWithTheRanksOfAHost) {
  const size_t bytes_1024 = BuildStartRanksRequests(OneHost(1024), Inputs(), kProgram)[0].ByteSizeLong();
  const size_t bytes_2048 = BuildStartRanksRequests(OneHost(2048), Inputs(), kProgram)[0].ByteSizeLong();
  std::printf("StartRanks request: %zu bytes for 1,024 ranks, %zu for 2,048\n", bytes_1024, bytes_2048);
  EXPECT_LT(bytes_1024, 150u * 1024);  // ~0.1 KiB a rank
  EXPECT_LT(bytes_2048, bytes_1024 * 21 / 10);
}

// The request the controller really sends (a fake agent records it).
TEST(StartRanksRequest, TheControllerSendsTheEnvironmentOncePerHost) {
  FakeAgentClient agent("big-host");
  agent.behaviour = [](int, const RankSpec&) {
    RankEnded ended;
    ended.set_state(RANK_EXITED);
    return std::optional<RankEnded>(ended);
  };
  JobSpec spec;
  spec.job_id = "job-big";
  spec.plan = OneHost(1024);
  spec.program = {"/bin/true"};
  spec.no_local_rank = true;
  spec.environment = Inputs();
  spec.keepalive_interval = 50ms;
  JobController controller(spec, {&agent}, nullptr, [](const std::string&) {});
  JobOutcome outcome = controller.Run();
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  ASSERT_EQ(agent.sent().size(), 1u);
  const StartRanksRequest sent = agent.sent()[0];
  EXPECT_EQ(sent.ranks_size(), 1024);
  EXPECT_LT(sent.ByteSizeLong(), 150u * 1024);
  EXPECT_EQ(sent.common_env().at("WORLD_SIZE"), "1024");
  EXPECT_EQ(agent.starts()[0].ranks(1023).env().at("RANK"), "1023");
  EXPECT_EQ(agent.starts()[0].ranks(1023).env().at("WORLD_SIZE"), "1024");
}

}  // namespace
}  // namespace dslaunch
