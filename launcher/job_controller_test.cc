#include "launcher/job_controller.h"

#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/fake_agent_client.h"

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
  }

  JobOutcome Run(std::function<void(JobController&)> during = nullptr) {
    JobController controller(
        spec_, {&a_, &b_}, &output_,
        [this](const std::string& line) {
          std::lock_guard<std::mutex> lock(notices_mu_);
          notices_.push_back(line);
        },
        [this](int attempt) { attempts_over_.push_back(attempt); });
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
  bool WaitStarted(int attempt) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < deadline;) {
      auto started = [&](FakeAgentClient& agent) {
        for (const auto& request : agent.starts()) {
          if (request.attempt() == attempt) return true;
        }
        return false;
      };
      if (started(a_) && started(b_)) return true;
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
};

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

TEST(JobControllerDescribe, NamesRankHostAndCause) {
  RankEnded ended;
  ended.set_state(RANK_KILLED);
  ended.set_signal(SIGSEGV);
  EXPECT_EQ(JobController::DescribeEnd(2, "w1", ended), "rank 2 on w1 was killed by signal 11 (SIGSEGV)");
}

}  // namespace
}  // namespace dslaunch
