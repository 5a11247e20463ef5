// Note [Ranks as another user]
// `dsagent --run_as USER` (a name, or a uid with a passwd entry): the agent
// runs as root and every rank of every job runs as USER, with USER's primary
// and supplementary groups and HOME, USER and LOGNAME set to USER's (a job's
// own values for those win). The rank keeper stays root, so stopping and
// reaping the rank's tree works as before; the rank drops its identity after
// fork and before it changes directory and execs, and only then sets its
// parent-death signal (a change of identity clears it).
// What it buys: a rank can no longer read what only the agent may read, such
// as the agent's token file (root, 0600) or its environment in /proc, nor
// signal or ptrace the agent or other users' ranks. Files a rank needs must
// be readable by USER, DSLAUNCH_TLS_DIR's key included (Note [Mutual TLS]):
// give the ranks their own folder's group, or run without --tls_dir there.
// An agent that is not root cannot change identity: --run_as is refused at
// start unless it names the agent's own user.
// Per job: `dsagent --allow_run_as USER[,USER...]` lists the users a job may
// ask for (`dslaunch --run_as USER`, StartRanksRequest.run_as); such a job's
// ranks run as that user instead of the agent's --run_as, and a job that
// asks for any other user is refused (PERMISSION_DENIED, naming the user and
// the list) before anything starts. dslaunch passes --allow_run_as to the
// agents it starts itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

struct RunAsUser {
  std::string name;
  int64_t uid = -1;
  int64_t gid = -1;
  std::vector<int64_t> groups;  // supplementary, the primary included
  std::string home;
};

// Looks `user` up (getpwnam, else a numeric uid through getpwuid) with its
// groups (getgrouplist). Errors name the user and the flag.
absl::StatusOr<RunAsUser> ResolveRunAsUser(const std::string& user);

// OK when this process can become `user`: it is root, or it is that user.
absl::Status CheckCanRunAs(const RunAsUser& user);

// The entry of `allowed` that `asked` names, by its name or its uid in
// decimal; null when none does.
const RunAsUser* AllowedRunAsUser(const std::vector<RunAsUser>& allowed, const std::string& asked);

}  // namespace dslaunch
