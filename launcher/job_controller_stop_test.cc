// JobController, Note [Honest exits]: a rank stopped by anyone but this
// controller's own teardown fails the attempt, naming who stopped it and
// why; a freeze of dslaunch itself is named as the cause of what it broke.
#include "launcher/job_controller_test_fixture.h"

namespace dslaunch::controller_testing {
namespace {

constexpr char kOutsideStop[] =
    "StopJob from dslaunch pid 4242 on other-host (ipv4:10.0.0.9:51234): attempt 0 of job other-job failed";

// Every rank but rank 0 on host-a finishes; rank 0 keeps running until the
// test ends it. Before issue 13 such an attempt "succeeded" once rank 0 was
// stopped by its agent, and dslaunch exited 0.
void OthersFinish(FakeAgentClient& a, FakeAgentClient& b) {
  a.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 0 ? std::nullopt : std::optional<RankEnded>(Exited(0));
  };
  b.behaviour = [](int, const RankSpec&) { return std::optional<RankEnded>(Exited(0)); };
}

// Plays a freeze of `frozen` that ended just now.
void RecordFreeze(FreezeWatch& watch, std::chrono::milliseconds frozen) {
  const auto now = std::chrono::steady_clock::now();
  watch.Record(FreezeWatch::Freeze{now - frozen, now});
}

// Rank 0 on host-a ends as `end` just after dslaunch was frozen for
// `frozen`, with this lease and keep-alive; every other rank finishes.
class JobControllerFreezeTest : public JobControllerTest {
 protected:
  JobOutcome RunRankEndAfterFreeze(std::chrono::milliseconds lease, std::chrono::milliseconds keepalive,
                                   std::chrono::milliseconds frozen, RankEnded end) {
    spec_.lease = lease;
    spec_.keepalive_interval = keepalive;
    OthersFinish(a_, b_);
    return Run([&](JobController&) {
      ASSERT_TRUE(WaitStarted(0));
      RecordFreeze(*freezes_, frozen);
      a_.EndRank(0, 0, end);
    });
  }
};

TEST_F(JobControllerTest, AnOutsideStopJobFailsTheAttemptAndNamesItsCaller) {
  OthersFinish(a_, b_);
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    a_.EndRank(0, 0, StoppedByAgent(STOP_REQUESTED, kOutsideStop));
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.exit_code, 1);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_EQ(outcome.attempts[0].cause,
            absl::StrCat("rank 0 on host-a was stopped by a StopJob this dslaunch did not send (", kOutsideStop,
                         "; killed by SIGTERM)"));
  EXPECT_EQ(outcome.attempts[0].blamed_agent, -1);  // not the host's fault
  EXPECT_THAT(Notices(), HasSubstr(absl::StrCat("root cause: rank 0 on host-a was stopped by a StopJob this "
                                                "dslaunch did not send (", kOutsideStop)));
  // The event log agrees with the exit code.
  std::vector<JobEvent> stopped = log_.Named("rank_stopped");
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].GetText("stop_reason"), "STOP_REQUESTED");
  EXPECT_EQ(stopped[0].GetText("stop_detail"), kOutsideStop);
  ASSERT_EQ(log_.Named("rank_failed").size(), 1u);
  ASSERT_EQ(log_.Named("attempt_end").size(), 1u);
  EXPECT_EQ(log_.Named("attempt_end")[0].GetText("end"), "ATTEMPT_RANK_STOPPED");
  EXPECT_EQ(log_.Named("attempt_end")[0].GetText("class"), "rank stopped by its agent");
  ASSERT_EQ(log_.Named("job_end").size(), 1u);
  EXPECT_EQ(log_.Named("job_end")[0].GetText("state"), "JOB_FAILED");
  EXPECT_EQ(log_.Named("job_end")[0].GetInt("exit_code"), 1);
}

TEST_F(JobControllerTest, AnOutsideStopOfOneRankStopsTheOthers) {
  // The other ranks keep running: the controller tears them down itself,
  // and those ends are its own stops, not more failures.
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.EndRank(0, 3, StoppedByAgent(STOP_REQUESTED, "StopJob from a caller that gave no name (ipv4:10.0.0.7:1)"));
  });
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("rank 3 on host-b was stopped by a StopJob this dslaunch did "
                                                   "not send (StopJob from a caller that gave no name"));
  EXPECT_EQ(outcome.attempts[0].stopped_ranks, 3);
  EXPECT_EQ(log_.Named("rank_failed").size(), 1u);
  for (FakeAgentClient* agent : {&a_, &b_}) EXPECT_EQ(agent->stops().size(), 1u) << agent->host();
}

TEST_F(JobControllerTest, ALeaseThatExpiredWhileDslaunchRanBlamesTheLink) {
  spec_.lease = 1000ms;
  spec_.keepalive_interval = 250ms;
  OthersFinish(a_, b_);
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    a_.EndRank(0, 0, StoppedByAgent(STOP_LEASE_EXPIRED, "no word from the controller for 1210 ms (lease 1000 ms)",
                                    1210));
  });
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_EQ(outcome.attempts[0].cause,
            "the agent on host-a lost the controller for 1210 ms (lease 1000 ms) and stopped rank 0 (killed by "
            "SIGTERM); dslaunch was not frozen: the network to host-a?");
  EXPECT_EQ(outcome.attempts[0].blamed_agent, 0);
  EXPECT_TRUE(log_.Named("controller_frozen").empty());
}

TEST_F(JobControllerFreezeTest, AFreezeShorterThanTheLeaseIsNotWhatExpiredIt) {
  JobOutcome outcome = RunRankEndAfterFreeze(
      10000ms, 1000ms, 600ms, StoppedByAgent(STOP_LEASE_EXPIRED, "no word from the controller for 10050 ms", 10050));
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("(killed by SIGTERM); dslaunch was frozen for only 600 ms: the "
                                                   "network to host-a?"));
}

TEST_F(JobControllerFreezeTest, ALeaseThatExpiredWhileDslaunchWasFrozenBlamesTheFreeze) {
  // The reproduction: dslaunch SIGSTOPped for 2 s with a 1 s lease.
  JobOutcome outcome = RunRankEndAfterFreeze(
      1000ms, 250ms, 2000ms,
      StoppedByAgent(STOP_LEASE_EXPIRED, "no word from the controller for 1150 ms (lease 1000 ms)", 1150));
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CONTROLLER_FROZEN);
  EXPECT_EQ(outcome.attempts[0].cause,
            "dslaunch was frozen for 2000 ms (SIGSTOP?) and the agents' leases (1000 ms) expired: the agent on "
            "host-a lost the controller for 1150 ms and stopped rank 0 (killed by SIGTERM)");
  EXPECT_EQ(outcome.attempts[0].blamed_agent, -1);
  EXPECT_THAT(Notices(), HasSubstr("dslaunch was frozen for 2000 ms (SIGSTOP?) and runs again; the agents' leases "
                                   "(1000 ms) expired meanwhile"));
  EXPECT_THAT(Notices(), HasSubstr("root cause: dslaunch was frozen for 2000 ms (SIGSTOP?)"));
  std::vector<JobEvent> frozen = log_.Named("controller_frozen");
  ASSERT_EQ(frozen.size(), 1u);
  EXPECT_EQ(frozen[0].GetInt("frozen_ms"), 2000);
  EXPECT_EQ(frozen[0].GetBool("leases_expired"), true);
  EXPECT_EQ(log_.Named("attempt_end")[0].GetText("end"), "ATTEMPT_CONTROLLER_FROZEN");
}

// test_chaos's controller_frozen, once in 50 runs: the agent on host-b
// stopped its rank for the lease, the rank on host-a lost its collective's
// peer and exited 1, and that end reached the controller first.
TEST_F(JobControllerFreezeTest, ARankThatFailedWhileDslaunchWasFrozenPastTheLeaseBlamesTheFreeze) {
  JobOutcome outcome = RunRankEndAfterFreeze(1000ms, 250ms, 1800ms,
                                             Exited(1, {"dsrank: gloo all_reduce: Connection closed by peer"}));
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CONTROLLER_FROZEN);
  EXPECT_EQ(outcome.attempts[0].cause,
            "dslaunch was frozen for 1800 ms (SIGSTOP?) and the agents' leases (1000 ms) expired, stopping the "
            "ranks; meanwhile rank 0 on host-a exited with code 1");
  EXPECT_EQ(outcome.attempts[0].blamed_agent, -1);
}

TEST_F(JobControllerFreezeTest, ARankThatFailsAfterAShortFreezeIsItsOwnCause) {
  JobOutcome outcome = RunRankEndAfterFreeze(10000ms, 1000ms, 600ms, Exited(7));
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(outcome.attempts[0].cause, "rank 0 on host-a exited with code 7");
}

TEST_F(JobControllerTest, AStreamThatBrokeWhileDslaunchWasFrozenIsNoLostHost) {
  // Frozen past the keep-alive window: the agent's stream broke ("keepalive
  // watchdog timeout"), but the host is fine.
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    RecordFreeze(*freezes_, 6000ms);
    b_.Lose(absl::UnavailableError("agent host-b (127.0.0.1:1) Watch: keepalive watchdog timeout"));
  });
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CONTROLLER_FROZEN);
  EXPECT_EQ(outcome.attempts[0].cause,
            "dslaunch was frozen for 6000 ms (SIGSTOP?) and lost its event stream from host-b meanwhile (agent "
            "host-b (127.0.0.1:1) Watch: keepalive watchdog timeout)");
  EXPECT_EQ(outcome.attempts[0].blamed_agent, -1);
  std::vector<JobEvent> lost = log_.Named("host_lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].GetInt("controller_frozen_ms"), 6000);
}

TEST_F(JobControllerTest, TheHostOfAFrozenStreamIsWatchedAndStoppedAtOnce) {
  // Its agent answers: the teardown reaches its ranks at once instead of
  // leaving them to the agent's lease.
  on_notice_ = [this](JobController&, const std::string& line) {
    if (line.find("lost its event stream from host-b") != std::string::npos) b_.Return();
  };
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    RecordFreeze(*freezes_, 6000ms);
    b_.Lose(absl::UnavailableError("keepalive watchdog timeout"));
  });
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CONTROLLER_FROZEN);
  EXPECT_EQ(b_.watch_starts(), 2);
  ASSERT_EQ(b_.stops().size(), 1u);
  EXPECT_EQ(a_.stops().size(), 1u);
}

TEST_F(JobControllerTest, AFreezeLongBeforeAStreamBreaksIsNotItsCause) {
  // A stall 30 s ago says nothing about a link cut now.
  const auto now = std::chrono::steady_clock::now();
  freezes_->Record(FreezeWatch::Freeze{now - 32s, now - 30s});
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Lose(absl::UnavailableError("keepalive watchdog timeout"));
  });
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HOST_LOST);
  EXPECT_EQ(outcome.attempts[0].cause, "lost host host-b (keepalive watchdog timeout)");
}

TEST_F(JobControllerTest, AStreamLostWithoutAFreezeIsALostHost) {
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Lose(absl::UnavailableError("keepalive watchdog timeout"));
  });
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HOST_LOST);
  EXPECT_EQ(outcome.attempts[0].cause, "lost host host-b (keepalive watchdog timeout)");
  EXPECT_EQ(outcome.attempts[0].blamed_agent, 1);
}

TEST_F(JobControllerTest, AnAgentShuttingDownFailsTheAttempt) {
  OthersFinish(a_, b_);
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    a_.EndRank(0, 0, StoppedByAgent(STOP_AGENT_SHUTDOWN, "agent received Terminated"));
  });
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_EQ(outcome.attempts[0].cause,
            "the agent on host-a stopped rank 0 because it was shutting down (agent received Terminated; killed by "
            "SIGTERM)");
}

TEST_F(JobControllerTest, AStopWithoutAReasonStillFails) {
  // An agent older than stop_reason: stopped_by_agent alone.
  OthersFinish(a_, b_);
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    RankEnded ended = Killed(SIGKILL);
    ended.set_stopped_by_agent(true);
    a_.EndRank(0, 0, ended);
  });
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_STOPPED);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("rank 0 on host-a was stopped by its agent although this "
                                                   "dslaunch did not ask (killed by SIGKILL"));
}

TEST_F(JobControllerTest, TheControllersOwnStopsAreNoFailures) {
  // A rank failure, and a stop signal: the ranks the controller stopped
  // itself (its StopJob, or a lease expiring during its teardown) are counted
  // as stopped, never as the cause.
  b_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 3 ? std::optional<RankEnded>(Exited(7)) : std::nullopt;
  };
  on_notice_ = [this](JobController&, const std::string& line) {
    if (line.find("stopping every rank") == std::string::npos) return;
    a_.EndRank(0, 0, StoppedByAgent(STOP_LEASE_EXPIRED, "no word from the controller for 10100 ms", 10100));
  };
  JobOutcome failed = Run();
  EXPECT_EQ(failed.exit_code, 7);
  EXPECT_EQ(failed.attempts[0].end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(failed.attempts[0].cause, "rank 3 on host-b exited with code 7");
  EXPECT_EQ(failed.attempts[0].stopped_ranks, 3);
  EXPECT_EQ(log_.Named("rank_failed").size(), 1u);
  EXPECT_TRUE(log_.Named("rank_stopped").empty());
}

TEST_F(JobControllerTest, AStopSignalsOwnStopsAreNoFailures) {
  JobOutcome outcome = Run([this](JobController& controller) {
    ASSERT_TRUE(WaitStarted(0));
    controller.OnSignal(SIGINT);
  });
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 130);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CANCELLED);
  EXPECT_EQ(outcome.attempts[0].stopped_ranks, 4);
  EXPECT_TRUE(log_.Named("rank_failed").empty());
}

TEST_F(JobControllerTest, AfterAFrozenStreamTheNextAttemptWatchesThatHostAgain) {
  // A job that is not elastic restarts after the freeze; the agent whose
  // stream broke still runs, and the next attempt's ranks there must be
  // watched (they used to be started with no stream to report them).
  spec_.max_restarts = 1;
  auto second_succeeds = [](int attempt, const RankSpec&) {
    return attempt == 1 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
  };
  a_.behaviour = second_succeeds;
  b_.behaviour = second_succeeds;
  std::atomic<bool> done{false};
  on_notice_ = [&](JobController&, const std::string& line) {
    // Back after the attempt's own try to watch it again, before the restart's.
    if (line.rfind("fail-fast:", 0) == 0) b_.Return();
    if (line.rfind("job job-under-test ", 0) == 0) done = true;  // the summary: Run() is ending
  };
  JobOutcome outcome = Run([&](JobController& controller) {
    ASSERT_TRUE(WaitStarted(0));
    RecordFreeze(*freezes_, 6000ms);
    b_.Lose(absl::UnavailableError("keepalive watchdog timeout"));
    // A bound, not a synchronisation: without a new stream the attempt would
    // never end.
    for (auto until = std::chrono::steady_clock::now() + 20s; !done && std::chrono::steady_clock::now() < until;) {
      std::this_thread::sleep_for(10ms);
    }
    if (!done) controller.OnSignal(SIGINT);
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_CONTROLLER_FROZEN);
  EXPECT_EQ(b_.watch_starts(), 2);
}

}  // namespace
}  // namespace dslaunch::controller_testing
