#include "agent/process_tree.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "gtest/gtest.h"

namespace dslaunch {
namespace {

std::vector<pid_t> Sorted(std::vector<pid_t> pids) {
  std::sort(pids.begin(), pids.end());
  return pids;
}

TEST(ProcessTree, ListsChildrenBothWaysZombiesIncluded) {
  std::vector<pid_t> started;
  for (int i = 0; i < 3; ++i) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (i == 0) ::_exit(0);  // stays a zombie until reaped below
      ::pause();
      ::_exit(0);
    }
    started.push_back(child);
  }
  // The first child has exited (or will): a zombie is a child all the same.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, started[0], &info, WEXITED | WNOWAIT), 0);

  std::vector<pid_t> mine = Sorted(started);
  std::vector<pid_t> from_scan = ChildrenFromProcScan(::getpid());
  // gtest runs no other child; anything else listed is a bug.
  EXPECT_EQ(Sorted(from_scan), mine);
  std::vector<pid_t> from_files;
  if (ChildrenFromTaskFiles(::getpid(), &from_files)) {
    EXPECT_EQ(Sorted(from_files), mine);
  }
  EXPECT_EQ(Sorted(ChildrenOf(::getpid())), mine);

  for (pid_t child : started) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  EXPECT_TRUE(ChildrenFromProcScan(::getpid()).empty());
  EXPECT_TRUE(ChildrenOf(::getpid()).empty());
}

TEST(ProcessTree, AProcessThatDoesNotExistHasNoChildren) {
  EXPECT_TRUE(ChildrenOf(0x3fffffff).empty());
}

}  // namespace
}  // namespace dslaunch
