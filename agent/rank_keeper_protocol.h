// What dsagent hands a rank keeper and what the keeper answers: Note [Rank
// keeper] in agent/process_spawner.h. Standard library only, so the keeper
// (a static binary that starts in well under a millisecond) links nothing else.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dslaunch {

// The keeper reads its spec from this descriptor (a memfd, read to the
// end) and writes its one report line to the other (a pipe).
inline constexpr int kKeeperSpecFd = 3;
inline constexpr int kKeeperReportFd = 4;
// The signals the keeper waits for, blocked from its first instruction on
// (dsagent spawns it with this mask): SIGCHLD and the ones that end it
// (SIGTERM, its parent-death signal, and SIGINT, SIGHUP, SIGQUIT).
sigset_t KeeperBlockedSignals();
bool IsKeeperEndSignal(int sig);

// The keeper's exit code when it could not start the rank (the report says why).
inline constexpr int kKeeperFailedExitCode = 127;

// The rank the keeper starts: execve(exe, argv, env) in working_dir.
struct KeeperSpec {
  std::string exe;                // path as given to execve
  std::string working_dir;        // empty: the keeper's own
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=VALUE": the rank's whole environment
  // Note [Core binding] (agent/core_binding.h): the keeper binds itself
  // before it forks the rank. Empty / -1: no binding.
  std::vector<int> cpus;
  int mem_node = -1;
  // Note [Ranks as another user] (agent/run_as_user.h): the rank drops to
  // this uid, gid and supplementary groups before it changes directory and
  // execs. -1: it keeps the keeper's identity.
  int64_t uid = -1;
  int64_t gid = -1;
  std::vector<int64_t> groups;
};

// NUL-separated fields behind a version tag. Strings may hold any byte but NUL
// (execve's own limit).
std::string EncodeKeeperSpec(const KeeperSpec& spec);
// False, with *error saying what is wrong, for anything EncodeKeeperSpec would
// not have written.
bool DecodeKeeperSpec(std::string_view data, KeeperSpec* spec, std::string* error);

// The keeper's report: exactly one line, written once the rank's execve
// succeeded ("started PID") or after it failed ("failed WHY").
struct KeeperReport {
  bool started = false;
  pid_t rank_pid = 0;  // when started
  std::string error;   // when not
};
std::string KeeperStartedLine(pid_t rank_pid);
std::string KeeperFailedLine(std::string_view why);
// Parses one line, with or without its newline. False for anything else.
bool ParseKeeperReport(std::string_view line, KeeperReport* report);

}  // namespace dslaunch
