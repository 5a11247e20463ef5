// JobController, Note [Membership]: elastic shrink, re-admission of a host
// that comes back, rescale at a checkpoint, blacklist.
#include "launcher/job_controller_test_fixture.h"

namespace dslaunch::controller_testing {
namespace {

TEST_F(JobControllerTest, ElasticShrinkContinuesOnTheRemainingHosts) {
  spec_.max_restarts = 2;
  spec_.min_nodes = 1;
  spec_.node_addresses = {"10.0.0.1", "10.0.0.2"};
  a_.behaviour = [](int attempt, const RankSpec&) {
    return attempt == 1 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
  };
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Lose(absl::UnavailableError("link down"));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HOST_LOST);
  EXPECT_EQ(b_.starts().size(), 1u);  // the lost host is not asked again
  const std::vector<StartRanksRequest> starts = a_.starts();
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(starts[1].ranks_size(), 2);
  EXPECT_EQ(EnvOf(starts[1].ranks(1), "WORLD_SIZE"), "2");
  EXPECT_EQ(EnvOf(starts[1].ranks(1), "RANK"), "1");
  EXPECT_EQ(EnvOf(starts[1].ranks(1), "MASTER_ADDR"), "10.0.0.1");
  EXPECT_THAT(Notices(), HasSubstr("elastic: continuing without host-b (lost) on 1 host(s); world size 4 -> 2"));
}

TEST_F(JobControllerTest, ALostHostThatAnswersAgainRejoinsAtTheNextRestart) {
  spec_.max_restarts = 3;
  spec_.min_nodes = 1;
  JobOutcome outcome = RunLosingHostBThenReturningIt([this] {
    a_.EndRank(1, 0, Exited(1));  // attempt 1 fails on host-a: the restart takes host-b back
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  ASSERT_EQ(outcome.attempts.size(), 3u);
  ASSERT_EQ(b_.starts().size(), 2u);  // attempts 0 and 2
  EXPECT_EQ(EnvOf(b_.starts()[1].ranks(0), "WORLD_SIZE"), "4");
  EXPECT_EQ(b_.watch_starts(), 2);  // its stream was opened again
  EXPECT_THAT(Notices(), HasSubstr("elastic: taking back host-b on 2 host(s); world size 2 -> 4"));
}

TEST_F(JobControllerTest, RejoinCheckTakesAReturningHostBackAtACheckpoint) {
  spec_.max_restarts = 1;  // the rescale costs no restart
  spec_.min_nodes = 1;
  spec_.rejoin_check = 10ms;
  spec_.preempt_grace = 10s;
  std::vector<int> checkpoints;
  // The ranks save a checkpoint and leave by themselves, as dsrank does.
  spec_.request_checkpoint = [this, &checkpoints](int attempt) {
    checkpoints.push_back(attempt);
    for (int rank : {0, 1}) a_.EndRank(attempt, rank, Exited(0));
  };
  JobOutcome outcome = RunLosingHostBThenReturningIt([] {});
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  ASSERT_EQ(outcome.attempts.size(), 3u);
  EXPECT_EQ(outcome.attempts[1].end, ATTEMPT_RESCALED);
  EXPECT_EQ(checkpoints, std::vector<int>{1});
  EXPECT_THAT(Notices(), HasSubstr("host host-b is back; asking every rank to save a checkpoint and stop"));
  EXPECT_THAT(Notices(), HasSubstr("restarting the job: attempt 2 (a host came back; no restart used)"));
  EXPECT_EQ(EnvOf(b_.starts().back().ranks(0), "WORLD_SIZE"), "4");
}

TEST_F(JobControllerTest, AHostThatKeepsFailingIsBlacklisted) {
  spec_.max_restarts = 2;
  spec_.min_nodes = 1;
  spec_.blacklist_after = 1;
  spec_.blacklist_cooldown = 1h;
  a_.behaviour = [](int attempt, const RankSpec&) {
    return attempt == 1 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
  };
  b_.behaviour = [](int attempt, const RankSpec& rank) {
    return attempt == 0 && rank.global_rank() == 2 ? std::optional<RankEnded>(Exited(3)) : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[0].blamed_agent, 1);
  EXPECT_EQ(b_.starts().size(), 1u);  // kept out of attempt 1
  EXPECT_THAT(Notices(), HasSubstr("blacklisting host-b for 3600000 ms: 1 failed attempt(s) blamed on it"));
  EXPECT_THAT(Notices(), HasSubstr("continuing without host-b (blacklisted) on 1 host(s); world size 4 -> 2"));
}

TEST_F(JobControllerTest, ElasticStopsBelowTheMinimum) {
  spec_.max_restarts = 2;
  spec_.min_nodes = 2;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Lose(absl::UnavailableError("link down"));
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.attempts.size(), 1u);
  EXPECT_THAT(Notices(), HasSubstr("1 host(s) remain, fewer than the minimum of 2"));
}

TEST_F(JobControllerTest, MasterAddrFollowsRankZerosHostAfterAShrink) {
  spec_.max_restarts = 1;
  spec_.min_nodes = 1;
  spec_.node_addresses = {"10.0.0.1", "10.0.0.2"};
  b_.behaviour = [](int attempt, const RankSpec&) {
    return attempt == 1 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
  };
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    a_.Lose(absl::UnavailableError("power cut"));  // rank 0's host
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  const std::vector<StartRanksRequest> starts = b_.starts();
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(EnvOf(starts[1].ranks(0), "RANK"), "0");
  EXPECT_EQ(EnvOf(starts[1].ranks(0), "MASTER_ADDR"), "10.0.0.2");
}

}  // namespace
}  // namespace dslaunch::controller_testing
