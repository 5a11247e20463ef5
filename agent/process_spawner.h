// Starting one rank process. The process runs in its own process group (so a
// stop signals everything it started, and a Ctrl-C on the agent's terminal
// never reaches it) and gets SIGKILL when the thread that spawned it dies
// (PR_SET_PDEATHSIG), so a crashed agent leaves no rank behind.
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
};

// A running child. The caller owns the file descriptors.
struct SpawnedProcess {
  pid_t pid = -1;      // also the process group id
  int pidfd = -1;      // readable when the process exits (pidfd_open)
  int stdout_fd = -1;  // read ends of the child's stdout/stderr, non-blocking
  int stderr_fd = -1;
};

// Spawns with Boost.Process. Must be called from a thread that outlives the
// child: the parent-death signal fires when the spawning *thread* exits.
// Errors: the program cannot be found or executed, the working directory does
// not exist, or a system call failed; each names the program and the cause.
absl::StatusOr<SpawnedProcess> SpawnRankProcess(const SpawnRequest& request);

}  // namespace dslaunch
