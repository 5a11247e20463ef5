// Test support for the JobController tests: a controller over two fake
// agents (host-a, host-b; two ranks each), with its notices, rank output and
// event log recorded. Included by job_controller_test.cc (lifecycle,
// restarts, signals), job_controller_membership_test.cc (elastic membership)
// and job_controller_health_test.cc (hangs and heartbeats).
#pragma once

#include <signal.h>

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/fake_agent_client.h"
#include "launcher/fake_job_event_log.h"
#include "launcher/job_controller.h"

namespace dslaunch::controller_testing {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

inline RankEnded Exited(int code, std::vector<std::string> tail = {}) {
  RankEnded ended;
  ended.set_state(RANK_EXITED);
  ended.set_exit_code(code);
  for (auto& line : tail) ended.add_stderr_tail(line);
  return ended;
}

inline RankEnded Killed(int signal) {
  RankEnded ended;
  ended.set_state(RANK_KILLED);
  ended.set_signal(signal);
  return ended;
}

// A rank its agent stopped (Note [Honest exits]), for `reason`.
inline RankEnded StoppedByAgent(StopReason reason, const std::string& detail, int64_t silent_ms = 0) {
  RankEnded ended = Killed(SIGTERM);
  ended.set_stopped_by_agent(true);
  ended.set_stop_reason(reason);
  ended.set_stop_detail(detail);
  ended.set_controller_silent_ms(silent_ms);
  return ended;
}

inline std::string EnvOf(const RankSpec& rank, const std::string& name) {
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
    // Note [Honest exits]: no thread watches; a test records the freezes it plays.
    spec_.freeze_watch = freezes_;
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
    if (board_ != nullptr) controller.PublishStatusTo(board_);
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
  // Waits (bounded) until the board's snapshot satisfies `done`.
  bool WaitForStatus(const std::function<bool(const JobStatusReply&)>& done) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
      if (done(board_->Snapshot())) return true;
      std::this_thread::yield();
    }
    return false;
  }

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

  std::shared_ptr<FreezeWatch> freezes_ = std::make_shared<FreezeWatch>(0ms, 500ms);
  JobSpec spec_;
  FakeAgentClient a_, b_;
  RecordingOutput output_;
  JobStatusBoard* board_ = nullptr;  // Note [Live job status]: set to watch the job's status
  std::mutex notices_mu_;
  std::vector<std::string> notices_;
  std::vector<int> attempts_over_;
  FakeJobEventLog log_;
  JobController* running_ = nullptr;
  std::function<void(JobController&, const std::string&)> on_notice_;
};

inline RankEnded CouldNotStart(const std::string& detail) {
  RankEnded lost;
  lost.set_state(RANK_LOST);
  lost.set_exit_code(127);
  lost.set_detail(detail);
  return lost;
}

inline std::vector<std::string> StatesLogged(const FakeJobEventLog& log) {
  std::vector<std::string> states;
  for (const JobEvent& event : log.Named("state")) states.push_back(*event.GetText("state"));
  return states;
}

}  // namespace dslaunch::controller_testing
