#include "launcher/freeze_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using Clock = FreezeWatch::Clock;

TEST(FreezeWatch, RecordedFreezesAreTakenOnce) {
  FreezeWatch watch(0ms, 500ms);
  EXPECT_TRUE(watch.TakeNew().empty());
  const auto now = Clock::now();
  watch.Record({now - 3000ms, now - 1000ms});
  watch.Record({now - 700ms, now});
  std::vector<FreezeWatch::Freeze> taken = watch.TakeNew();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].duration(), 2000ms);
  EXPECT_EQ(taken[1].duration(), 700ms);
  EXPECT_TRUE(watch.TakeNew().empty());
  // Taken or not, they still explain what happened around them.
  ASSERT_TRUE(watch.LongestSince(now - 5000ms).has_value());
  EXPECT_EQ(watch.LongestSince(now - 5000ms)->duration(), 2000ms);
  EXPECT_EQ(watch.LongestSince(now - 500ms)->duration(), 700ms);
  EXPECT_FALSE(watch.LongestSince(now + 1ms).has_value());
}

TEST(FreezeWatch, SeesItsOwnProcessStoppedAndContinued) {
  // A child process watches itself; the test stops it for 800 ms. The
  // child exits 0 when it saw that freeze once (seen first by whichever of
  // TakeNew and the thread ran first after SIGCONT, never twice).
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    FreezeWatch watch(20ms, 400ms);
    // Let the thread look once before the stop. Not a wait for an event:
    // if the thread has not looked yet, its first look still measures the
    // freeze from construction, so a short sleep cannot fail the test.
    std::this_thread::sleep_for(100ms);
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
    std::vector<FreezeWatch::Freeze> seen;
    auto long_ones = [&] {
      int n = 0;
      for (const auto& freeze : seen) n += freeze.duration() >= 700ms ? 1 : 0;
      return n;
    };
    for (auto until = Clock::now() + 20s; long_ones() == 0 && Clock::now() < until;) {
      for (const auto& freeze : watch.TakeNew()) seen.push_back(freeze);
      std::this_thread::sleep_for(10ms);
    }
    // The thread, waking up after the caller, must not report it again. A
    // chance for a double report (five of the thread's 20 ms periods); too
    // short a sleep could only hide a bug, never fail a correct build.
    std::this_thread::sleep_for(100ms);
    for (const auto& freeze : watch.TakeNew()) seen.push_back(freeze);
    ::_exit(long_ones() == 1 ? 0 : 1);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(800ms);  // the injected freeze itself
  ASSERT_EQ(::kill(child, SIGCONT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace dslaunch
