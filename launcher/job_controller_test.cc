#include "launcher/job_controller.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/fake_agent_client.h"
#include "launcher/fake_job_event_log.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

RankEnded Exited(int code, std::vector<std::string> tail = {}) {
  RankEnded ended;
  ended.set_state(RANK_EXITED);
  ended.set_exit_code(code);
  for (auto& line : tail) ended.add_stderr_tail(line);
  return ended;
}

RankEnded Killed(int signal) {
  RankEnded ended;
  ended.set_state(RANK_KILLED);
  ended.set_signal(signal);
  return ended;
}

std::string EnvOf(const RankSpec& rank, const std::string& name) {
  auto it = rank.env().find(name);
  return it == rank.env().end() ? "" : it->second;
}

// Collects what ranks print, by attempt.
class RecordingOutput : public RankOutputSink {
 public:
  absl::Status OnAttemptStarted(int attempt) override {
    std::lock_guard<std::mutex> lock(mu_);
    attempts_started.push_back(attempt);
    return absl::OkStatus();
  }
  void OnLine(int attempt, int rank, const std::string& host, bool is_stderr,
              const std::string& line) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines.push_back(absl::StrCat(attempt, ":", host, ":", rank, ":", is_stderr ? "E" : "O", ":", line));
  }
  std::mutex mu_;
  std::vector<int> attempts_started;
  std::vector<std::string> lines;
};

class JobControllerTest : public ::testing::Test {
 protected:
  JobControllerTest() : a_("host-a"), b_("host-b") {
    spec_.job_id = "job-under-test";
    spec_.plan = BuildLaunchPlan({{"host-a", {0, 1}}, {"host-b", {0, 1}}});
    spec_.program = {"train", "--lr", "3e-4"};
    spec_.environment.master_addr = "host-a";
    spec_.environment.store_addr = "controller:1234";
    spec_.environment.job_id = spec_.job_id;
    spec_.keepalive_interval = 50ms;
    spec_.teardown_margin = 2s;
    spec_.restart_backoff = 0ms;  // tests that look at the backoff set their own
  }

  JobOutcome Run(std::function<void(JobController&)> during = nullptr) {
    JobController controller(
        spec_, {&a_, &b_}, &output_,
        [this](const std::string& line) {
          {
            std::lock_guard<std::mutex> lock(notices_mu_);
            notices_.push_back(line);
          }
          // Runs on the controller's thread, at a known point of its loop.
          if (on_notice_) on_notice_(*running_, line);
        },
        [this](int attempt) { attempts_over_.push_back(attempt); }, &log_);
    running_ = &controller;
    std::thread side;
    if (during) side = std::thread([&] { during(controller); });
    JobOutcome outcome = controller.Run();
    if (side.joinable()) side.join();
    EXPECT_EQ(controller.state(), outcome.state);
    return outcome;
  }

  std::string Notices() {
    std::lock_guard<std::mutex> lock(notices_mu_);
    return absl::StrJoin(notices_, "\n");
  }

  // Waits (bounded) until both agents have started `attempt`.
  // Attempt 0 on both hosts; host-b is lost; attempt 1 runs on host-a; host-b
  // returns, then `after_return` runs. Attempt 2 (whatever it runs on) succeeds.
  JobOutcome RunLosingHostBThenReturningIt(std::function<void()> after_return) {
    auto third_succeeds = [](int attempt, const RankSpec&) {
      return attempt == 2 ? std::optional<RankEnded>(Exited(0)) : std::nullopt;
    };
    a_.behaviour = third_succeeds;
    b_.behaviour = third_succeeds;
    return Run([this, after_return](JobController&) {
      ASSERT_TRUE(WaitStarted(0));
      b_.Lose(absl::UnavailableError("link down"));
      ASSERT_TRUE(WaitStarted(1, /*agents=*/1));
      b_.Return();
      after_return();
    });
  }

  // Waits (bounded) until `agents` agents (host-a first) have started `attempt`.
  bool WaitStarted(int attempt, int agents = 2) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < deadline;) {
      auto started = [&](FakeAgentClient& agent) {
        for (const auto& request : agent.starts()) {
          if (request.attempt() == attempt) return true;
        }
        return false;
      };
      if (started(a_) && (agents < 2 || started(b_))) return true;
      std::this_thread::yield();
    }
    return false;
  }

  JobSpec spec_;
  FakeAgentClient a_, b_;
  RecordingOutput output_;
  std::mutex notices_mu_;
  std::vector<std::string> notices_;
  std::vector<int> attempts_over_;
  FakeJobEventLog log_;
  JobController* running_ = nullptr;
  std::function<void(JobController&, const std::string&)> on_notice_;
};

RankEnded CouldNotStart(const std::string& detail) {
  RankEnded lost;
  lost.set_state(RANK_LOST);
  lost.set_exit_code(127);
  lost.set_detail(detail);
  return lost;
}

std::vector<std::string> StatesLogged(const FakeJobEventLog& log) {
  std::vector<std::string> states;
  for (const JobEvent& event : log.Named("state")) states.push_back(*event.GetText("state"));
  return states;
}

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
              ::testing::ElementsAre("train", "--lr", "3e-4", "--local_rank=1"));
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
  EXPECT_EQ(outcome.exit_code, 7);
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

TEST_F(JobControllerTest, NoProgressIsAHang) {
  spec_.hang_timeout = 100ms;
  spec_.read_progress = [](int) { return std::optional<std::string>("step 7"); };  // never moves
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("no training progress for"));
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("(last: step 7)"));
  EXPECT_EQ(a_.stops().size(), 1u);
}

TEST_F(JobControllerTest, NoProgressMarkerYetIsNotAHang) {
  spec_.hang_timeout = 50ms;
  spec_.read_progress = [](int) { return std::optional<std::string>(); };  // still starting up
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    std::this_thread::sleep_for(200ms);  // four timeouts without a marker: the thing under test
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
}

// A heartbeat at `step` whose newest collective is #seq (finished or not).
RankProgress Beat(int64_t step, int64_t seq, bool finished) {
  RankProgress progress;
  progress.set_step(step);
  CollectiveRecord* call = progress.add_recent_collectives();
  call->set_seq(seq);
  call->set_op("all_reduce");
  call->set_completed(finished);
  return progress;
}

TEST_F(JobControllerTest, HangDiagnosisNamesTheLaggingRankAndWritesStacks) {
  const std::string dir = ::testing::TempDir() + "/hang-diagnosis-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  spec_.hang_timeout = 100ms;
  spec_.diagnosis_dir = dir;
  a_.stacks_text = "#0 nanosleep (host-a)";
  b_.stacks_text = "#0 gloo::allreduce (host-b)";
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    // Rank 1 stopped before collective #5; the others wait in it. Steps stay put.
    a_.Heartbeat(0, 0, Beat(4, 5, false));
    a_.Heartbeat(0, 1, Beat(4, 4, true));
    b_.Heartbeat(0, 2, Beat(4, 5, false));
    b_.Heartbeat(0, 3, Beat(4, 5, false));
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  const std::string& cause = outcome.attempts[0].cause;
  EXPECT_THAT(cause, HasSubstr("(last: steps 4,4,4,4)"));
  EXPECT_THAT(cause, HasSubstr("rank 1 (host-a) is behind: newest collective #4 (all_reduce, finished) while "
                               "ranks 0 (host-a), 2 (host-b), 3 (host-b) wait in #5 (all_reduce)"));
  EXPECT_THAT(cause, HasSubstr("stacks and recent collectives of 4 rank(s) in " + dir + "/attempt_0/diagnosis"));
  EXPECT_EQ(a_.diagnose_calls(), 1);
  EXPECT_EQ(b_.diagnose_calls(), 1);
  std::ifstream file(dir + "/attempt_0/diagnosis/rank_2.txt");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("rank 2 on host-b, pid 1002"));
  EXPECT_THAT(text, HasSubstr("#0 gloo::allreduce (host-b)"));
  EXPECT_THAT(text, HasSubstr("#5 all_reduce 0 B"));
  std::filesystem::remove_all(dir);
}

TEST_F(JobControllerTest, AdvancingStepsAreNotAHang) {
  spec_.hang_timeout = 500ms;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    // Every rank advances one step per 40 ms for 40 steps: 1.6 s in all,
    // three hang timeouts, none of them without progress.
    for (int step = 0; step < 40; ++step) {
      for (int rank : {0, 1}) a_.Heartbeat(0, rank, Beat(step, step + 1, true));
      for (int rank : {2, 3}) b_.Heartbeat(0, rank, Beat(step, step + 1, true));
      std::this_thread::sleep_for(40ms);
    }
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  EXPECT_EQ(a_.diagnose_calls(), 0);
}

TEST_F(JobControllerTest, AMissedHeartbeatFailsTheAttemptAsAHang) {
  spec_.heartbeat_timeout = 3s;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    RankProgress missed = Beat(6, 12, true);
    missed.set_missed_heartbeat_ms(3200);
    b_.Heartbeat(0, 3, missed);
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  EXPECT_THAT(outcome.attempts[0].cause,
              HasSubstr("rank 3 on host-b sent no heartbeat for 3200 ms while its process lives"));
  EXPECT_EQ(b_.starts().front().heartbeat_timeout_ms(), 3000);  // the agents watch with the job's bound
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
}  // namespace dslaunch
