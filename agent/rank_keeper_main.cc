// dsagent_keeper: the per-rank keeper, Note [Rank keeper] in
// agent/process_spawner.h. Started by dsagent only:
//
//   dsagent_keeper --agent_pid PID   (spec on fd 3, report pipe on fd 4)
//
// Single-threaded; every wait is sigwaitinfo/sigtimedwait on blocked signals,
// so no signal handler runs here at all.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <signal.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "agent/process_tree.h"
#include "agent/rank_keeper_protocol.h"

namespace dslaunch {
namespace {

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the agent is gone; nobody to tell
    data.remove_prefix(static_cast<size_t>(n));
  }
}

[[noreturn]] void FailToStart(const std::string& why) {
  WriteAll(kKeeperReportFd, KeeperFailedLine(why));
  ::_exit(kKeeperFailedExitCode);
}

bool ReadAll(int fd, std::string* out) {
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return true;
    if (errno != EINTR) return false;
  }
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Why the rank's child could not become the rank: written by the child to the
// exec-status pipe, read by the keeper. Nothing arrives when execve succeeds.
struct ExecFailure {
  int stage;  // 0: chdir, 1: execve, 2: becoming the rank's user
  int error;  // errno
};

// Note [Ranks as another user] (agent/run_as_user.h): groups first, then the
// gid, then the uid (after which no other change is allowed). True when the
// process is that user now.
bool BecomeUser(const KeeperSpec& spec) {
  std::vector<gid_t> groups(spec.groups.begin(), spec.groups.end());
  return ::setgroups(groups.size(), groups.data()) == 0 && ::setgid(static_cast<gid_t>(spec.gid)) == 0 &&
         ::setuid(static_cast<uid_t>(spec.uid)) == 0;
}

// Note [Core binding] (agent/core_binding.h): the keeper binds itself, so
// the rank and every thread it starts inherit the cores and the memory node.
void BindToCores(const KeeperSpec& spec) {
  if (spec.cpus.empty()) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : spec.cpus) {
    if (cpu >= CPU_SETSIZE) FailToStart("core " + std::to_string(cpu) + " is beyond this keeper's CPU set size");
    CPU_SET(cpu, &mask);
  }
  if (::sched_setaffinity(0, sizeof(mask), &mask) != 0) {
    FailToStart(std::string("cannot bind to its cores (sched_setaffinity): ") + std::strerror(errno));
  }
  if (spec.mem_node < 0) return;
  unsigned long nodes[16] = {};  // 1024 nodes
  if (spec.mem_node >= static_cast<int>(sizeof(nodes) * 8)) return;
  nodes[spec.mem_node / (8 * sizeof(unsigned long))] |= 1ul << (spec.mem_node % (8 * sizeof(unsigned long)));
  if (::syscall(SYS_set_mempolicy, MPOL_BIND, nodes, sizeof(nodes) * 8) != 0) {
    FailToStart("cannot bind memory to NUMA node " + std::to_string(spec.mem_node) +
                " (set_mempolicy): " + std::strerror(errno));
  }
}

// Forks the rank and execs it. Returns its pid once execve succeeded; on any
// failure reports it and exits.
pid_t StartRank(KeeperSpec& spec, const sigset_t& rank_mask) {
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) FailToStart(std::string("pipe2: ") + std::strerror(errno));
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(spec.env);
  const pid_t keeper = ::getpid();
  const pid_t rank = ::fork();
  if (rank < 0) FailToStart(std::string("fork: ") + std::strerror(errno));
  if (rank == 0) {
    // The rank: its own process group (the agent's stop signals reach it and
    // everything it starts), SIGKILL when the keeper dies, the agent's
    // signal dispositions except an ignored SIGPIPE, an empty mask.
    ::setpgid(0, 0);
    ExecFailure failure{0, 0};
    // Before the parent-death signal: a change of identity clears it.
    if (spec.uid >= 0 && !BecomeUser(spec)) {
      failure = ExecFailure{2, errno};
      ssize_t ignored = ::write(status_pipe[1], &failure, sizeof(failure));
      (void)ignored;
      ::_exit(kKeeperFailedExitCode);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != keeper) ::_exit(kKeeperFailedExitCode);
    ::close(status_pipe[0]);
    ::close(kKeeperReportFd);
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &rank_mask, nullptr);
    if (spec.working_dir.empty() || ::chdir(spec.working_dir.c_str()) == 0) {
      failure.stage = 1;
      ::execve(spec.exe.c_str(), argv.data(), envp.data());
    }
    failure.error = errno;
    ssize_t ignored = ::write(status_pipe[1], &failure, sizeof(failure));
    (void)ignored;
    ::_exit(kKeeperFailedExitCode);
  }
  // Also here: the agent may signal the group as soon as it has the pid.
  ::setpgid(rank, rank);
  ::close(status_pipe[1]);
  ExecFailure failure{};
  ssize_t n;
  while ((n = ::read(status_pipe[0], &failure, sizeof(failure))) < 0 && errno == EINTR) {
  }
  ::close(status_pipe[0]);
  if (n > 0) {
    while (::waitpid(rank, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (failure.stage == 0) {
      FailToStart("cannot enter working directory " + spec.working_dir + ": " +
                  std::strerror(failure.error));
    }
    if (failure.stage == 2) {
      FailToStart("cannot become uid " + std::to_string(spec.uid) + " gid " + std::to_string(spec.gid) +
                  " (dsagent --run_as): " + std::strerror(failure.error));
    }
    FailToStart("cannot start '" + spec.exe + "': " + std::strerror(failure.error));
  }
  return rank;
}

// SIGKILLs every descendant of the keeper (the rank's process group and
// whatever left it: with the keeper as subreaper, every orphan of the tree is
// the keeper's child) until the keeper has no child left, reaping them all.
// Records the rank's status if the rank is reaped here.
void KillEveryDescendant(pid_t rank, int* rank_status, bool* rank_reaped) {
  const pid_t self = ::getpid();
  sigset_t child_signal;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  while (true) {
    for (pid_t child : ChildrenOf(self)) ::kill(child, SIGKILL);
    while (true) {
      int status = 0;
      pid_t reaped = ::waitpid(-1, &status, WNOHANG);
      if (reaped < 0 && errno == EINTR) continue;
      if (reaped < 0) return;  // ECHILD: nothing is left
      if (reaped == 0) break;  // some still run (or are being killed)
      if (reaped == rank && !*rank_reaped) {
        *rank_status = status;
        *rank_reaped = true;
      }
    }
    // Wait for the next death, briefly: a child listed too late is killed on
    // the next round.
    const timespec tick{0, 50 * 1000 * 1000};
    ::sigtimedwait(&child_signal, nullptr, &tick);
  }
}

// Ends the keeper the way the rank ended: the same exit code, or the same
// signal (without a core file of the keeper).
[[noreturn]] void EndLike(int status) {
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  ::prctl(PR_SET_DUMPABLE, 0);
  ::signal(sig, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::kill(::getpid(), sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  // A signal whose default is to be ignored cannot have ended the rank.
  ::_exit(128 + sig);
}

int Run(int argc, char** argv) {
  const sigset_t waited = KeeperBlockedSignals();
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);
  // The rank starts with no signal blocked, whatever the keeper's mask.
  sigset_t rank_mask;
  sigemptyset(&rank_mask);

  pid_t agent = 0;
  if (argc == 3 && std::string_view(argv[1]) == "--agent_pid") {
    std::string_view text(argv[2]);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), agent);
    if (ec != std::errc() || end != text.data() + text.size()) agent = 0;
  }
  if (agent <= 0) {
    static const char kUsage[] =
        "dsagent_keeper: started by dsagent only (usage: dsagent_keeper --agent_pid PID, "
        "spec on fd 3, report on fd 4)\n";
    WriteAll(STDERR_FILENO, kUsage);
    return 2;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The agent died before the line above: nothing was started, nobody waits.
  if (::getppid() != agent) return kKeeperFailedExitCode;
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    FailToStart(std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno));
  }
  std::string encoded;
  if (!ReadAll(kKeeperSpecFd, &encoded)) FailToStart(std::string("read spec: ") + std::strerror(errno));
  ::close(kKeeperSpecFd);
  KeeperSpec spec;
  std::string error;
  if (!DecodeKeeperSpec(encoded, &spec, &error)) FailToStart(error);
  BindToCores(spec);

  const pid_t rank = StartRank(spec, rank_mask);
  WriteAll(kKeeperReportFd, KeeperStartedLine(rank));
  ::close(kKeeperReportFd);

  int rank_status = SIGKILL;  // a wait status: killed by SIGKILL, until the real one is known
  bool rank_reaped = false;
  while (!rank_reaped) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&waited, &info);
    if (sig < 0) continue;  // EINTR
    if (IsKeeperEndSignal(sig)) {
      // The agent died (or someone ends the keeper): the rank's whole tree
      // goes at once. Nobody would read its output any more.
      ::kill(-rank, SIGKILL);
      break;
    }
    // SIGCHLD: reap orphans that ended; the rank itself is looked at without
    // reaping, so its pid (and process group id) stays reserved until the
    // group has been signalled.
    while (true) {
      siginfo_t child{};
      if (::waitid(P_ALL, 0, &child, WEXITED | WNOHANG | WNOWAIT) != 0 || child.si_pid == 0) break;
      if (child.si_pid == rank) {
        ::kill(-rank, SIGKILL);
        while (::waitpid(rank, &rank_status, 0) < 0 && errno == EINTR) {
        }
        rank_reaped = true;
        break;
      }
      while (::waitpid(child.si_pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  KillEveryDescendant(rank, &rank_status, &rank_reaped);
  EndLike(rank_status);
}

}  // namespace
}  // namespace dslaunch

int main(int argc, char** argv) { return dslaunch::Run(argc, argv); }
