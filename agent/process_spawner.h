// Starting one rank process, under a keeper of its own (Note [Rank keeper]).
// The rank runs in its own process group (so a stop signals everything it
// started, and a Ctrl-C on the agent's terminal never reaches it); nothing it
// starts outlives it, its keeper or the agent.
//
// Note [Rank keeper]
// Every rank runs under a small keeper, dsagent_keeper, installed beside
// dsagent (Horovod's "middleman" idea):
//
//   dsagent thread --posix_spawn--> dsagent_keeper --fork/exec--> rank --> children ...
//   (pidfd, waitpid)                own process group,            own process group,
//                                   parent-death signal SIGTERM,  parent-death signal
//                                   child subreaper               SIGKILL (the keeper)
//
// - The agent writes the rank's program, argv, environment and working folder
//   into a memfd (the keeper's fd 3). The keeper's own environment is the
//   agent's: only the rank carries the rank's environment, so whoever looks
//   for a rank by its DSLAUNCH_JOB_ID and RANK finds the rank itself.
// - The keeper answers on a pipe (its fd 4) with one line: "started PID" once
//   the rank's execve succeeded, or "failed WHY". That pid is the one the agent
//   signals, reports (RankStarted, StartRanksReply) and diagnoses (eu-stack):
//   the rank's, never the keeper's. The agent's stop is unchanged: SIGTERM and
//   SIGCONT to the rank's process group, SIGKILL after the grace.
// - When the rank ends, the keeper SIGKILLs the rank's process group and then
//   every descendant still alive: as the child subreaper it inherits every
//   orphan of the tree, so a grandchild that called setsid() or double-forked
//   is found as well. Then it exits the way the rank did, with the same exit
//   code or killed by the same signal: the agent's waitpid on the keeper reads
//   the rank's own status. So RankEnded is reported once the rank's whole
//   tree is gone: a restart never overlaps a leftover of the attempt before
//   (one that could still hold GPU memory or write a checkpoint).
// - When the agent dies, SIGKILL included, the kernel sends the keeper SIGTERM
//   (its parent-death signal, tied to the spawning thread) and the keeper
//   SIGKILLs the whole tree at once, without a grace: nobody would read the
//   rank's output or report its end any more, and the controller restarts the
//   job without this host, where a rank still writing a checkpoint could only
//   do harm. SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to the keeper itself do
//   the same.
// - Only a SIGKILL of the keeper itself escapes this: the rank then dies by
//   its own parent-death signal and the agent SIGKILLs the rank's process
//   group, but a descendant that had left the group lives on.
// - No cgroups: a cgroup per rank (cgroup.kill) would close that last gap, but
//   needs a delegated cgroup v2 subtree, which an agent started by dslaunch or
//   over ssh as an ordinary user does not have; the keeper works everywhere.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

struct SpawnRequest {
  std::vector<std::string> argv;           // argv[0] is searched in PATH when it has no '/'
  std::map<std::string, std::string> env;  // added to the agent's own environment
  std::string working_dir;                 // empty: the agent's
  std::string keeper;                      // path of dsagent_keeper (Note [Rank keeper])
  std::vector<int> cpus;                   // Note [Core binding]: empty: not bound
  int mem_node = -1;                       // with cpus: the NUMA node for memory, or -1
  // Note [Ranks as another user] (agent/run_as_user.h): -1: the agent's own.
  int64_t uid = -1;
  int64_t gid = -1;
  std::vector<int64_t> groups;
};

// A running rank. The caller owns the file descriptors and reaps the keeper.
struct SpawnedProcess {
  pid_t pid = -1;         // the rank; also its process group id
  pid_t keeper_pid = -1;  // the agent's child; ends with the rank's exit status
  int pidfd = -1;         // the keeper's: readable when it exits (pidfd_open)
  int stdout_fd = -1;     // read ends of the rank's stdout/stderr, non-blocking
  int stderr_fd = -1;
};

// Starts the keeper, which starts the rank, and returns once the rank's execve
// succeeded. Must be called from a thread that outlives the keeper: the
// parent-death signal fires when the spawning *thread* exits.
// Errors: the program cannot be found or executed, the working directory does
// not exist, the keeper cannot be started, or a system call failed; each names
// the program and the cause.
absl::StatusOr<SpawnedProcess> SpawnRankProcess(const SpawnRequest& request);

}  // namespace dslaunch
