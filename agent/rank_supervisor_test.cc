#include "agent/rank_supervisor.h"

#include <signal.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/blocking_queue.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;

// Collects a rank's events; waits are bounded, never sleeps.
struct Recorder {
  BlockingQueue<RankEvent> events;
  RankSupervisor::EventSink sink() {
    return [this](RankEvent e) { events.Push(std::move(e)); };
  }
  // Everything up to and including the RankEnded event.
  std::vector<RankEvent> UntilEnded(std::chrono::milliseconds bound = 20s) {
    std::vector<RankEvent> seen;
    auto deadline = std::chrono::steady_clock::now() + bound;
    while (auto e = events.PopUntil(deadline)) {
      seen.push_back(*e);
      if (e->has_ended()) break;
    }
    return seen;
  }
};

SpawnRequest Shell(const std::string& script) {
  SpawnRequest request;
  request.argv = {"/bin/sh", "-c", script};
  return request;
}

// Gone or a zombie (whoever reaps orphans here may be slow to do it).
bool ProcessGone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return true;
  size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] == 'Z';
}

const RankEnded* FindEnded(const std::vector<RankEvent>& events) {
  for (const auto& e : events) {
    if (e.has_ended()) return &e.ended();
  }
  return nullptr;
}

std::vector<std::string> Lines(const std::vector<RankEvent>& events, bool is_stderr) {
  std::vector<std::string> lines;
  for (const auto& e : events) {
    if (e.has_output() && e.output().is_stderr() == is_stderr) lines.push_back(e.output().line());
  }
  return lines;
}

TEST(RankSupervisor, ReportsOutputLinesAndExitCode) {
  Recorder recorder;
  RankSupervisor rank(0, 5, Shell("echo one; echo two; echo oops >&2; printf tail; exit 7"),
                      recorder.sink());
  EXPECT_GT(rank.WaitForSpawn(), 0);
  auto events = recorder.UntilEnded();
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.front().has_started());
  EXPECT_EQ(events.front().global_rank(), 5);
  EXPECT_EQ(Lines(events, false), (std::vector<std::string>{"one", "two", "tail"}));
  EXPECT_EQ(Lines(events, true), (std::vector<std::string>{"oops"}));
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_EXITED);
  EXPECT_EQ(ended->exit_code(), 7);
  EXPECT_FALSE(ended->stopped_by_agent());
  EXPECT_EQ(ended->stop_reason(), STOP_REASON_UNSPECIFIED);
  ASSERT_EQ(ended->stderr_tail_size(), 1);
  EXPECT_EQ(ended->stderr_tail(0), "oops");
  EXPECT_GT(ended->ended_unix_us(), 0);
}

TEST(RankSupervisor, PassesEnvironmentAndWorkingDirectory) {
  Recorder recorder;
  SpawnRequest request = Shell("echo \"$DS_TEST_VALUE $(pwd)\"");
  request.env["DS_TEST_VALUE"] = "hello";
  request.working_dir = "/tmp";
  RankSupervisor rank(0, 0, request, recorder.sink());
  auto events = recorder.UntilEnded();
  EXPECT_EQ(Lines(events, false), (std::vector<std::string>{"hello /tmp"}));
}

TEST(RankSupervisor, StopSendsSigtermFirst) {
  Recorder recorder;
  RankSupervisor rank(0, 0, Shell("exec sleep 1000"), recorder.sink());
  ASSERT_GT(rank.WaitForSpawn(), 0);
  EXPECT_TRUE(rank.Stop(10s));
  auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_KILLED);
  EXPECT_EQ(ended->signal(), SIGTERM);
  EXPECT_TRUE(ended->stopped_by_agent());
  EXPECT_FALSE(rank.Stop(1s));  // already ended
}

TEST(RankSupervisor, TheFirstStopsCauseIsReported) {
  Recorder recorder;
  RankSupervisor rank(0, 0, Shell("exec sleep 1000"), recorder.sink());
  ASSERT_GT(rank.WaitForSpawn(), 0);
  EXPECT_TRUE(rank.Stop(10s, RankStopCause{STOP_LEASE_EXPIRED, "no word from the controller for 1200 ms", 1200}));
  rank.Stop(0s, RankStopCause{STOP_REQUESTED, "StopJob from someone later", 0});  // shortens the grace only
  auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_TRUE(ended->stopped_by_agent());
  EXPECT_EQ(ended->stop_reason(), STOP_LEASE_EXPIRED);
  EXPECT_EQ(ended->stop_detail(), "no word from the controller for 1200 ms");
  EXPECT_EQ(ended->controller_silent_ms(), 1200);
}

TEST(RankSupervisor, EscalatesToSigkillAfterTheGrace) {
  Recorder recorder;
  // The shell ignores SIGTERM and says when it is ready, so the stop cannot
  // race the trap.
  RankSupervisor rank(0, 0, Shell("trap '' TERM; echo ready; while :; do sleep 1; done"),
                      recorder.sink());
  while (auto e = recorder.events.PopFor(20s)) {
    if (e->has_output() && e->output().line() == "ready") break;
  }
  auto start = std::chrono::steady_clock::now();
  rank.Stop(300ms);
  auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_KILLED);
  EXPECT_EQ(ended->signal(), SIGKILL);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
}

TEST(RankSupervisor, MissingProgramIsLostWithTheReason) {
  Recorder recorder;
  SpawnRequest request;
  request.argv = {"no-such-program-dslaunch"};
  RankSupervisor rank(0, 3, request, recorder.sink());
  EXPECT_EQ(rank.WaitForSpawn(), 0);
  auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_LOST);
  EXPECT_NE(ended->detail().find("no-such-program-dslaunch"), std::string::npos);
  EXPECT_NE(ended->detail().find("not found"), std::string::npos);
}

TEST(RankSupervisor, KillsWhatTheRankLeftRunning) {
  Recorder recorder;
  RankSupervisor rank(0, 0, Shell("sleep 1000 & echo $!; exit 0"), recorder.sink());
  auto events = recorder.UntilEnded();
  auto lines = Lines(events, false);
  ASSERT_EQ(lines.size(), 1u);
  int leftover = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lines[0], &leftover));
  // The leftover was SIGKILLed when its leader ended; once init reaps it, the
  // pid is gone. Bounded wait on that event.
  bool gone = false;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < deadline;) {
    if (ProcessGone(leftover)) {
      gone = true;
      break;
    }
    std::this_thread::yield();
  }
  EXPECT_TRUE(gone) << "pid " << leftover << " survived its rank";
}

TEST(RankSupervisor, SplitsOverlongLines) {
  Recorder recorder;
  RankSupervisor rank(0, 0, Shell("head -c 150000 /dev/zero | tr '\\0' x"), recorder.sink());
  auto lines = Lines(recorder.UntilEnded(), false);
  size_t total = 0;
  for (const auto& line : lines) {
    EXPECT_LE(line.size(), RankSupervisor::kMaxLineBytes);
    total += line.size();
  }
  EXPECT_EQ(total, 150000u);
  EXPECT_EQ(lines.size(), 3u);
}

}  // namespace
}  // namespace dslaunch
