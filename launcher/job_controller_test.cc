// JobController: the attempt lifecycle, fail-fast, restarts, signals,
// preemption and the event log, against fake agents.
#include "launcher/job_controller_test_fixture.h"

namespace dslaunch::controller_testing {
namespace {

TEST_F(JobControllerTest, EveryRankExitingZeroSucceeds) {
  auto ok = [](int, const RankSpec&) { return std::optional<RankEnded>(Exited(0)); };
  a_.behaviour = ok;
  b_.behaviour = ok;
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  EXPECT_EQ(outcome.exit_code, 0);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_SUCCEEDED);
  EXPECT_TRUE(a_.stops().empty());
  // MASTER_PORT came from rank 0's agent, once.
  EXPECT_EQ(a_.reserve_calls(), 1);
  EXPECT_EQ(b_.reserve_calls(), 0);
  const std::vector<StartRanksRequest> starts = b_.starts();
  ASSERT_EQ(starts.size(), 1u);
  const StartRanksRequest& request = starts[0];
  ASSERT_EQ(request.ranks_size(), 2);
  const RankSpec& rank3 = request.ranks(1);
  EXPECT_EQ(rank3.global_rank(), 3);
  EXPECT_EQ(EnvOf(rank3, "RANK"), "3");
  EXPECT_EQ(EnvOf(rank3, "LOCAL_RANK"), "1");
  EXPECT_EQ(EnvOf(rank3, "MASTER_PORT"), "29555");
  EXPECT_EQ(EnvOf(rank3, "DSLAUNCH_ATTEMPT"), "0");
  EXPECT_THAT(std::vector<std::string>(rank3.argv().begin(), rank3.argv().end()),
              ::testing::ElementsAre("train", "--local_rank=1", "--lr", "3e-4"));
  EXPECT_EQ(attempts_over_, std::vector<int>{0});
}

TEST_F(JobControllerTest, FirstFailureStopsEveryRankAndNamesTheCause) {
  b_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 3
               ? std::optional<RankEnded>(Exited(7, {"Traceback", "ValueError: bad shape"}))
               : std::nullopt;
  };
  spec_.stop_grace = 1234ms;
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_NE(outcome.exit_code, 0);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  const AttemptReport& report = outcome.attempts[0];
  EXPECT_EQ(report.end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(report.cause, "rank 3 on host-b exited with code 7");
  EXPECT_EQ(report.stopped_ranks, 3);
  EXPECT_GE(report.teardown_us, 0);
  // Every agent was told to stop, with the configured grace.
  for (FakeAgentClient* agent : {&a_, &b_}) {
    ASSERT_EQ(agent->stops().size(), 1u) << agent->host();
    EXPECT_EQ(agent->stops()[0].second, 1234ms);
  }
  EXPECT_THAT(Notices(), HasSubstr("root cause: rank 3 on host-b exited with code 7; last stderr: "
                                   "Traceback | ValueError: bad shape"));
  EXPECT_THAT(Notices(), HasSubstr("fail-fast: 3 other rank(s) stopped"));
}

TEST_F(JobControllerTest, SignalledRankExitsWith128PlusSignal) {
  a_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 1 ? std::optional<RankEnded>(Killed(SIGKILL)) : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.exit_code, 128 + SIGKILL);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_SIGNALLED);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("signal 9 (SIGKILL)"));
}

TEST_F(JobControllerTest, RestartsUntilAnAttemptSucceeds) {
  spec_.max_restarts = 3;
  spec_.store_token_for_attempt = [](int attempt) { return "store-token-of-attempt-" + std::to_string(attempt); };
  a_.behaviour = [](int attempt, const RankSpec& rank) {
    if (attempt < 2 && rank.global_rank() == 0) return std::optional<RankEnded>(Exited(1));
    return std::optional<RankEnded>(attempt < 2 ? std::nullopt : std::optional<RankEnded>(Exited(0)));
  };
  b_.behaviour = [](int attempt, const RankSpec&) {
    return attempt < 2 ? std::nullopt : std::optional<RankEnded>(Exited(0));
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  EXPECT_EQ(outcome.exit_code, 0);
  ASSERT_EQ(outcome.attempts.size(), 3u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(outcome.attempts[1].end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(outcome.attempts[2].end, ATTEMPT_SUCCEEDED);
  const std::vector<StartRanksRequest> starts = b_.starts();
  ASSERT_EQ(starts.size(), 3u);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const RankSpec& rank = starts[attempt].ranks(0);
    EXPECT_EQ(EnvOf(rank, "DSLAUNCH_ATTEMPT"), std::to_string(attempt));
    EXPECT_EQ(EnvOf(rank, "TORCHELASTIC_RESTART_COUNT"), std::to_string(attempt));
    EXPECT_EQ(EnvOf(rank, "TORCHELASTIC_MAX_RESTARTS"), "3");
    // Note [Store token per attempt]: each attempt's ranks get their own.
    EXPECT_EQ(EnvOf(rank, "DSLAUNCH_STORE_TOKEN"), "store-token-of-attempt-" + std::to_string(attempt));
  }
  EXPECT_EQ(attempts_over_, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(output_.attempts_started, (std::vector<int>{0, 1, 2}));
  EXPECT_THAT(Notices(), HasSubstr("succeeded after 3 attempt(s)"));
}

TEST_F(JobControllerTest, GivesUpWhenTheRestartBudgetIsSpent) {
  spec_.max_restarts = 1;
  a_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 0 ? std::optional<RankEnded>(Exited(5)) : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.exit_code, 5);
  EXPECT_EQ(outcome.attempts.size(), 2u);
  EXPECT_THAT(Notices(), HasSubstr("failed after 2 attempt(s)"));
  EXPECT_THAT(Notices(), HasSubstr("not restarting: all 1 restart(s) used"));
  std::vector<JobEvent> decisions = log_.Named("restart_decision");
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].GetBool("restart"), true);
  EXPECT_EQ(decisions[1].GetBool("restart"), false);
  EXPECT_EQ(decisions[1].GetText("reason"), "all 1 restart(s) used");
}

TEST_F(JobControllerTest, BackoffGrowsAndIsWaitedOut) {
  spec_.max_restarts = 3;
  spec_.restart_backoff = 2ms;
  spec_.max_restart_backoff = 5ms;
  a_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 0 ? std::optional<RankEnded>(Exited(1)) : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 4u);
  std::vector<int64_t> backoffs;
  for (const JobEvent& decision : log_.Named("restart_decision")) {
    if (decision.GetBool("restart") == true) backoffs.push_back(*decision.GetInt("backoff_ms"));
  }
  EXPECT_EQ(backoffs, (std::vector<int64_t>{2, 4, 5}));  // 8 capped at 5
  // Attempt k started no sooner than its backoff after attempt k-1 ended.
  std::vector<JobEvent> starts = log_.Named("attempt_start");
  std::vector<JobEvent> ends = log_.Named("attempt_end");
  ASSERT_EQ(starts.size(), 4u);
  ASSERT_EQ(ends.size(), 4u);
  for (int k = 1; k < 4; ++k) {
    EXPECT_GE(starts[k].time_us() - ends[k - 1].time_us(), backoffs[k - 1] * 1000) << k;
  }
  EXPECT_THAT(Notices(), HasSubstr("restarting the job: attempt 1 (restart 1 of 3) in 2 ms"));
}

TEST_F(JobControllerTest, SignalDuringTheBackoffCancelsWithoutAnotherAttempt) {
  spec_.max_restarts = 5;
  spec_.restart_backoff = 60s;  // the signal must cut this short
  a_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 1 ? std::optional<RankEnded>(Exited(3)) : std::nullopt;
  };
  const auto begin = std::chrono::steady_clock::now();
  JobOutcome outcome = Run([this](JobController& controller) {
    ASSERT_TRUE(log_.WaitFor("restart_decision", 10s));
    controller.OnSignal(SIGTERM);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 30s);
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 128 + SIGTERM);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(a_.starts().size(), 1u);
  EXPECT_EQ(b_.starts().size(), 1u);
  EXPECT_THAT(Notices(), HasSubstr("received SIGTERM while waiting to restart; not starting attempt 1"));
  EXPECT_THAT(Notices(), HasSubstr("job job-under-test was cancelled after 1 attempt(s): attempt 0: "
                                   "rank error (rank 1 on host-a exited with code 3); SIGTERM while "
                                   "waiting to start attempt 1"));
  std::vector<std::string> states = StatesLogged(log_);
  ASSERT_GE(states.size(), 2u);
  EXPECT_EQ(states[states.size() - 2], "JOB_RESTARTING");
  EXPECT_EQ(states.back(), "JOB_CANCELLED");
  std::vector<JobEvent> signals = log_.Named("signal");
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].GetText("name"), "SIGTERM");
  EXPECT_EQ(signals[0].GetText("action"), "cancel_restart");
  EXPECT_EQ(log_.Named("job_end").back().GetInt("exit_code"), 128 + SIGTERM);
}

TEST_F(JobControllerTest, SignalDuringTheTeardownOfAFailedAttemptDoesNotRestart) {
  spec_.max_restarts = 5;
  a_.behaviour = [](int, const RankSpec& rank) {
    return rank.global_rank() == 0 ? std::optional<RankEnded>(Exited(4)) : std::nullopt;
  };
  on_notice_ = [](JobController& controller, const std::string& line) {
    if (line == "attempt 0: rank 0 on host-a exited with code 4; stopping every rank") {
      controller.OnSignal(SIGINT);
    }
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 130);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_RANK_ERROR);  // the class is kept
  EXPECT_THAT(Notices(), HasSubstr("SIGINT during the teardown of attempt 0"));
  EXPECT_EQ(log_.Named("restart_decision").back().GetText("reason"), "dslaunch received SIGINT");
  EXPECT_EQ(a_.starts().size(), 1u);
}

TEST_F(JobControllerTest, HostLostDuringTheBackoffFailsTheNextAttempt) {
  spec_.max_restarts = 1;
  spec_.restart_backoff = 20ms;
  a_.behaviour = [](int attempt, const RankSpec& rank) {
    return attempt == 0 && rank.global_rank() == 0 ? std::optional<RankEnded>(Exited(1))
                                                   : std::nullopt;
  };
  // Lost just before the backoff begins: the news must not be dropped, or
  // attempt 1 would wait forever for ranks of a dead host.
  on_notice_ = [this](JobController&, const std::string& line) {
    if (line.find("restarting the job") != std::string::npos) {
      b_.Lose(absl::UnavailableError("socket closed"));
    }
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[1].end, ATTEMPT_HOST_LOST);
  EXPECT_THAT(outcome.attempts[1].cause, HasSubstr("socket closed"));
}

TEST_F(JobControllerTest, RepeatedIdenticalStartupFailureStopsEarly) {
  spec_.max_restarts = 5;
  // The program is missing everywhere; the rank that reports it first differs.
  a_.behaviour = [](int attempt, const RankSpec& rank) {
    return attempt == 0 && rank.global_rank() == 0
               ? std::optional<RankEnded>(CouldNotStart("program 'train' not found in PATH"))
               : std::nullopt;
  };
  b_.behaviour = [](int attempt, const RankSpec& rank) {
    return attempt == 1 && rank.global_rank() == 2
               ? std::optional<RankEnded>(CouldNotStart("program 'train' not found in PATH"))
               : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.exit_code, 127);
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[1].startup_error, "program 'train' not found in PATH");
  EXPECT_THAT(Notices(), HasSubstr("not restarting: attempt 1 failed to start the same way as "
                                   "attempt 0 (program 'train' not found in PATH)"));
  EXPECT_THAT(Notices(), HasSubstr("failed after 2 attempt(s): attempt 0: startup failure (rank 0 "
                                   "on host-a could not be started: program 'train' not found in "
                                   "PATH); attempt 1: startup failure (rank 2 on host-b"));
  std::vector<JobEvent> decisions = log_.Named("restart_decision");
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[1].GetBool("early_stop"), true);
}

TEST_F(JobControllerTest, DifferentStartupFailuresUseTheBudget) {
  spec_.max_restarts = 2;
  a_.behaviour = [](int attempt, const RankSpec& rank) {
    return rank.global_rank() == 0
               ? std::optional<RankEnded>(CouldNotStart(absl::StrCat("error ", attempt)))
               : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.attempts.size(), 3u);
  EXPECT_THAT(Notices(), ::testing::Not(HasSubstr("the same way")));
}

TEST_F(JobControllerTest, EventLogRecordsTheWholeStory) {
  spec_.max_restarts = 1;
  b_.behaviour = [](int attempt, const RankSpec& rank) {
    if (attempt == 0) {
      return rank.global_rank() == 3
                 ? std::optional<RankEnded>(Exited(7, {"Traceback", "ValueError: \"bad\" shape"}))
                 : std::nullopt;
    }
    return std::optional<RankEnded>(Exited(0));
  };
  a_.behaviour = [](int attempt, const RankSpec&) {
    return attempt == 0 ? std::nullopt : std::optional<RankEnded>(Exited(0));
  };
  JobOutcome outcome = Run();
  ASSERT_EQ(outcome.state, JOB_SUCCEEDED);

  EXPECT_THAT(StatesLogged(log_),
              ::testing::ElementsAre("JOB_PLANNING", "JOB_STARTING", "JOB_RUNNING", "JOB_STOPPING",
                                     "JOB_RESTARTING", "JOB_STARTING", "JOB_RUNNING",
                                     "JOB_SUCCEEDED"));
  std::vector<JobEvent> events = log_.events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().name(), "job_start");
  EXPECT_EQ(events.front().GetInt("world_size"), 4);
  EXPECT_EQ(events.back().name(), "job_end");
  EXPECT_EQ(events.back().GetText("state"), "JOB_SUCCEEDED");
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].time_us(), events[i - 1].time_us());

  std::vector<JobEvent> failed = log_.Named("rank_failed");
  ASSERT_EQ(failed.size(), 1u);  // stopped ranks are not failures
  EXPECT_EQ(failed[0].GetInt("rank"), 3);
  EXPECT_EQ(failed[0].GetText("host"), "host-b");
  EXPECT_EQ(failed[0].GetInt("exit_code"), 7);
  EXPECT_EQ(failed[0].GetText("stderr_tail"), "Traceback\nValueError: \"bad\" shape");

  std::vector<JobEvent> ends = log_.Named("attempt_end");
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0].GetText("end"), "ATTEMPT_RANK_ERROR");
  EXPECT_EQ(ends[0].GetText("class"), "rank error");
  EXPECT_EQ(ends[0].GetInt("exit_code"), 7);
  EXPECT_EQ(ends[0].GetInt("stopped_ranks"), 3);
  EXPECT_GE(*ends[0].GetInt("teardown_us"), 0);
  EXPECT_EQ(ends[1].GetText("end"), "ATTEMPT_SUCCEEDED");

  std::vector<JobEvent> recoveries = log_.Named("recovery");
  ASSERT_EQ(recoveries.size(), 1u);
  const JobEvent& recovery = recoveries[0];
  EXPECT_EQ(recovery.GetInt("attempt"), 1);
  EXPECT_EQ(recovery.GetInt("failed_attempt"), 0);
  EXPECT_EQ(recovery.GetInt("failed_us"), failed[0].GetInt("ended_us"));
  EXPECT_GT(*recovery.GetInt("failed_us"), 0);
  EXPECT_LE(*recovery.GetInt("failed_us"), *recovery.GetInt("all_gone_us"));
  EXPECT_LE(*recovery.GetInt("all_gone_us"), *recovery.GetInt("restarted_us"));
  EXPECT_EQ(*recovery.GetInt("failure_to_restart_us"),
            *recovery.GetInt("restarted_us") - *recovery.GetInt("failed_us"));
  EXPECT_THAT(Notices(), HasSubstr("recovery: attempt 1 started "));
}

TEST_F(JobControllerTest, LostHostFailsTheAttempt) {
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Lose(absl::UnavailableError("connection reset"));
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HOST_LOST);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("lost host host-b"));
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("connection reset"));
}

TEST_F(JobControllerTest, SignalCancelsWithoutRestarting) {
  spec_.max_restarts = 5;
  JobOutcome outcome = Run([this](JobController& controller) {
    ASSERT_TRUE(WaitStarted(0));
    controller.OnSignal(SIGINT);
  });
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 130);
  EXPECT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(a_.stops().size(), 1u);
  EXPECT_EQ(b_.stops().size(), 1u);
}

TEST_F(JobControllerTest, AgentRefusingToStartIsAStartupFailure) {
  b_.start_error = absl::UnauthenticatedError("wrong token");
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_STARTUP_FAILURE);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("wrong token"));
  // The ranks that did start on host-a were stopped.
  EXPECT_EQ(a_.stops().size(), 1u);
  EXPECT_EQ(outcome.attempts[0].stopped_ranks, 2);
}

TEST_F(JobControllerTest, RankThatCannotSpawnIsAStartupFailure) {
  a_.behaviour = [](int, const RankSpec& rank) {
    RankEnded lost;
    lost.set_state(RANK_LOST);
    lost.set_exit_code(127);
    lost.set_detail("program 'train' not found in PATH");
    return rank.global_rank() == 0 ? std::optional<RankEnded>(lost) : std::nullopt;
  };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.exit_code, 127);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_STARTUP_FAILURE);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("not found in PATH"));
}

TEST_F(JobControllerTest, UnwatchableAgentFailsBeforeStartingAnything) {
  b_.watch_error = absl::UnavailableError("no route to host");
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_TRUE(a_.starts().empty());
  EXPECT_THAT(Notices(), HasSubstr("no route to host"));
}

TEST_F(JobControllerTest, OutputReachesTheSinkWithHostAndRank) {
  b_.behaviour = [](int, const RankSpec&) { return std::nullopt; };
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    b_.Output(0, 2, false, "step 1 loss 4.2");
    b_.Output(0, 3, true, "warning");
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  EXPECT_THAT(output_.lines, ::testing::ElementsAre("0:host-b:2:O:step 1 loss 4.2",
                                                    "0:host-b:3:E:warning"));
}

TEST_F(JobControllerTest, PreemptionLetsRanksCheckpointAndExit) {
  spec_.max_restarts = 3;
  spec_.preempt_grace = 10s;
  std::atomic<int> requested{-1};
  spec_.request_checkpoint = [&](int attempt) {
    requested = attempt;
    // The ranks save and leave by themselves, as dsrank does.
    for (int rank : {0, 1}) a_.EndRank(attempt, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(attempt, rank, Exited(0));
  };
  JobOutcome outcome = Run([this](JobController& controller) {
    ASSERT_TRUE(WaitStarted(0));
    controller.OnSignal(SIGTERM);
  });
  EXPECT_EQ(requested, 0);
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 143);
  EXPECT_EQ(outcome.attempts.size(), 1u);
  EXPECT_TRUE(a_.stops().empty());  // nobody had to be stopped
  EXPECT_THAT(Notices(), HasSubstr("every rank saved its checkpoint and stopped"));
}

TEST_F(JobControllerTest, PreemptionGraceRunsOutThenRanksAreStopped) {
  spec_.preempt_grace = 50ms;
  spec_.request_checkpoint = [](int) {};  // ranks that never react
  JobOutcome outcome = Run([this](JobController& controller) {
    ASSERT_TRUE(WaitStarted(0));
    controller.OnSignal(SIGUSR1);
  });
  EXPECT_EQ(outcome.state, JOB_CANCELLED);
  EXPECT_EQ(outcome.exit_code, 128 + SIGUSR1);
  EXPECT_EQ(a_.stops().size(), 1u);
  EXPECT_THAT(Notices(), HasSubstr("did not stop within the 50 ms checkpoint grace"));
}

TEST_F(JobControllerTest, AttemptEnvironmentReachesEveryRankOfThatAttempt) {
  spec_.max_restarts = 1;
  spec_.attempt_environment = [](int attempt) {
    std::map<std::string, std::string> env;
    if (attempt > 0) env["DSLAUNCH_RESUME_TAG"] = "global_step8";
    return env;
  };
  b_.behaviour = [](int attempt, const RankSpec& rank) -> std::optional<RankEnded> {
    if (attempt == 0 && rank.global_rank() == 3) return Exited(1);
    return Exited(0);
  };
  a_.behaviour = [](int, const RankSpec&) -> std::optional<RankEnded> { return Exited(0); };
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  ASSERT_EQ(a_.starts().size(), 2u);
  EXPECT_EQ(a_.starts()[0].ranks(0).env().count("DSLAUNCH_RESUME_TAG"), 0u);
  EXPECT_EQ(a_.starts()[1].ranks(0).env().at("DSLAUNCH_RESUME_TAG"), "global_step8");
  EXPECT_EQ(b_.starts()[1].ranks(1).env().at("DSLAUNCH_RESUME_TAG"), "global_step8");
}

TEST(JobControllerDescribe, NamesRankHostAndCause) {
  RankEnded ended;
  ended.set_state(RANK_KILLED);
  ended.set_signal(SIGSEGV);
  EXPECT_EQ(JobController::DescribeEnd(2, "w1", ended), "rank 2 on w1 was killed by signal 11 (SIGSEGV)");
}

}  // namespace
}  // namespace dslaunch::controller_testing

namespace dslaunch::controller_testing {
namespace {

// Note [Controller failover]: dslaunch --resume_job attaches to attempt 1,
// whose ranks an earlier controller started; attempt 0 failed before.
class ResumedJobTest : public JobControllerTest {
 protected:
  ResumedJobTest() {
    AttemptReport failed;
    failed.attempt = 0;
    failed.end = ATTEMPT_RANK_ERROR;
    failed.exit_code = 3;
    failed.cause = "rank 2 on host-b exited with code 3";
    spec_.resume = JobSpec::Resume{1, {failed}};
    spec_.max_restarts = 1;
    a_.RunAlready(1, {0, 1});
    b_.RunAlready(1, {2, 3});
  }
  bool WaitWatched() {
    for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
      if (a_.watch_starts() > 0 && b_.watch_starts() > 0) return true;
      std::this_thread::yield();
    }
    return false;
  }
};

TEST_F(ResumedJobTest, AttachesToTheRunningRanksWithoutStartingThem) {
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitWatched());
    for (int rank : {0, 1}) a_.EndRank(1, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(1, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_TRUE(a_.sent().empty());
  EXPECT_TRUE(b_.sent().empty());
  for (FakeAgentClient* agent : {&a_, &b_}) {
    ASSERT_EQ(agent->watch_requests().size(), 1u);
    EXPECT_TRUE(agent->watch_requests()[0].replay());
    EXPECT_EQ(agent->watch_requests()[0].replay_from_attempt(), 1);
  }
  ASSERT_EQ(outcome.attempts.size(), 2u);
  EXPECT_EQ(outcome.attempts[1].attempt, 1);
  ASSERT_EQ(log_.Named("attempt_attached").size(), 1u);
  EXPECT_EQ(log_.Named("attempt_attached")[0].GetInt("attempt"), 1);
  EXPECT_TRUE(log_.Named("recovery").empty());
}

TEST_F(ResumedJobTest, AnAttemptThatShrankIsAttachedOnItsHostsOnly) {
  spec_.resume->hosts = {"host-a"};  // host-b was lost before attempt 1
  JobOutcome outcome = Run([this](JobController&) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         a_.watch_starts() == 0 && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::yield();
    }
    for (int rank : {0, 1}) a_.EndRank(1, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  EXPECT_TRUE(a_.sent().empty());
  EXPECT_TRUE(b_.watch_requests().empty());
  ASSERT_EQ(a_.watch_requests().size(), 1u);
  EXPECT_TRUE(a_.watch_requests()[0].replay());
}

TEST_F(ResumedJobTest, TheEarlierAttemptsCountAgainstTheRestartBudget) {
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitWatched());
    a_.EndRank(1, 0, Exited(7));
  });
  // Attempt 0 used the one restart: attempt 1's failure ends the job.
  EXPECT_EQ(outcome.state, JOB_FAILED);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_TRUE(a_.sent().empty());
  EXPECT_TRUE(b_.sent().empty());
  EXPECT_THAT(Notices(), HasSubstr("rank 0 on host-a exited with code 7"));
}

TEST_F(ResumedJobTest, AfterTheAttachedAttemptFailsTheNextOneStartsAsUsual) {
  spec_.max_restarts = 2;
  a_.behaviour = [](int attempt, const RankSpec&) {
    return attempt == 2 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
  };
  b_.behaviour = a_.behaviour;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitWatched());
    b_.EndRank(1, 3, Exited(1));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  ASSERT_EQ(a_.sent().size(), 1u);
  EXPECT_EQ(a_.sent()[0].attempt(), 2);
  // A later Watch (none here) would not ask for a replay again.
  for (const auto& request : a_.watch_requests()) EXPECT_EQ(request.replay_from_attempt(), 1);
}

}  // namespace
}  // namespace dslaunch::controller_testing
