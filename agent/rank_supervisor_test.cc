#include "agent/rank_supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>

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
  request.keeper = DSAGENT_KEEPER_FOR_TESTS;
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
  SpawnRequest request = Shell("");
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

// Waits, bounded, until the process is gone (or a zombie).
bool GoneWithin(int pid, std::chrono::milliseconds bound) {
  for (auto deadline = std::chrono::steady_clock::now() + bound;
       std::chrono::steady_clock::now() < deadline;) {
    if (ProcessGone(pid)) return true;
    std::this_thread::yield();
  }
  return ProcessGone(pid);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Note [Rank keeper]: a grandchild that left the rank's process group and
// session (setsid) is found through the keeper, the subreaper of the tree.
TEST(RankSupervisor, KillsALeftoverThatLeftTheProcessGroup) {
  char dir_template[] = "/tmp/dsagent-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  Recorder recorder;
  // The grandchild writes its pid (whole: renamed into place) from its own
  // session; the rank waits for that file, prints the pid and exits 0.
  RankSupervisor rank(
      0, 0,
      Shell("setsid sh -c 'echo $$ >" + dir + "/g.tmp && mv " + dir + "/g.tmp " + dir +
            "/g; exec sleep 1000' & while [ ! -e " + dir + "/g ]; do sleep 0.01; done; cat " + dir +
            "/g; exit 0"),
      recorder.sink());
  auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_EXITED);
  EXPECT_EQ(ended->exit_code(), 0);
  auto lines = Lines(events, false);
  ASSERT_EQ(lines.size(), 1u);
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lines[0], &grandchild));
  EXPECT_TRUE(GoneWithin(grandchild, 10s)) << "pid " << grandchild << " (own session) survived its rank";
  ::unlink((dir + "/g").c_str());
  ::rmdir(dir.c_str());
}

// Note [Rank keeper]: the pid the agent reports, signals and diagnoses is the
// rank's, which alone carries the rank's environment; its parent is the keeper.
TEST(RankSupervisor, ReportsTheRanksOwnPidNotTheKeepers) {
  Recorder recorder;
  SpawnRequest request = Shell("echo $$; while :; do sleep 1; done");
  request.env["DS_TEST_RANK_MARK"] = "mark-7";
  RankSupervisor rank(0, 0, request, recorder.sink());
  const pid_t pid = rank.WaitForSpawn();
  ASSERT_GT(pid, 0);
  std::string printed;
  while (auto e = recorder.events.PopFor(20s)) {
    if (e->has_started()) {
      EXPECT_EQ(e->started().pid(), pid);
    }
    if (e->has_output()) {
      printed = e->output().line();
      break;
    }
  }
  EXPECT_EQ(printed, std::to_string(pid));  // the shell's own $$
  EXPECT_NE(ReadFile("/proc/" + std::to_string(pid) + "/environ").find("DS_TEST_RANK_MARK=mark-7"),
            std::string::npos);
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  ASSERT_NE(paren, std::string::npos);
  int parent = 0, group = 0;
  ASSERT_EQ(std::sscanf(stat.c_str() + paren + 2, "%*c %d %d", &parent, &group), 2);
  EXPECT_EQ(group, pid);  // its own process group
  EXPECT_EQ(ReadFile("/proc/" + std::to_string(parent) + "/comm"), "dsagent_keeper\n");
  EXPECT_EQ(ReadFile("/proc/" + std::to_string(parent) + "/environ").find("DS_TEST_RANK_MARK"),
            std::string::npos);
  EXPECT_TRUE(rank.Stop(10s));
  const auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->signal(), SIGTERM);
}

// The keeper ends the way the rank did, so the agent reports the rank's signal.
TEST(RankSupervisor, ReportsTheSignalThatKilledTheRank) {
  Recorder recorder;
  RankSupervisor rank(0, 0, Shell("kill -SEGV $$"), recorder.sink());
  const auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_KILLED);
  EXPECT_EQ(ended->signal(), SIGSEGV);
  EXPECT_FALSE(ended->stopped_by_agent());
}

// An executable file that execve refuses: the keeper's report names it.
TEST(RankSupervisor, ProgramThatCannotBeExecutedIsLostWithTheReason) {
  char path[] = "/tmp/dsagent-not-a-program.XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "\x01\x02\x03\x04", 4), 4);
  ::close(fd);
  ::chmod(path, 0755);
  Recorder recorder;
  SpawnRequest request = Shell("");
  request.argv = {path};
  RankSupervisor rank(0, 2, request, recorder.sink());
  EXPECT_EQ(rank.WaitForSpawn(), 0);
  const auto events = recorder.UntilEnded();
  const RankEnded* ended = FindEnded(events);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state(), RANK_LOST);
  EXPECT_NE(ended->detail().find(std::string("cannot start '") + path + "'"), std::string::npos)
      << ended->detail();
  EXPECT_NE(ended->detail().find("Exec format error"), std::string::npos) << ended->detail();
  ::unlink(path);
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
