// The dsagents a job talks to, and how they came to be (ARCHITECTURE.md,
// "Agents"): started here by the controller (local), started on each host
// over ssh, or already running (static). Agents this object started are
// stopped when it is destroyed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/control_plane_defaults.h"

namespace dslaunch {

struct AgentEndpoint {
  std::string host;     // as the user named it; shown in [host:rank]
  std::string address;  // host:port to dial
};

struct AgentLaunchOptions {
  std::string agent_binary;   // path of dsagent (same path on every host for ssh)
  std::string token_file;     // passed to the agents (same path on every host for ssh)
  // Local agents only, when token_file is empty: written to each agent's
  // stdin (dsagent --token_stdin). The token then exists only in the pipe and
  // in the processes: nothing on disk to remove or to leave behind when
  // dslaunch is killed (Note [Token on stdin], agent_fleet.cc).
  std::string token;
  int64_t lease_ms = kDefaultLeaseMs;
  int64_t stop_grace_ms = kDefaultStopGraceMs;
  std::string agent_log_dir;  // where started agents write their stderr; empty: /dev/null
  std::string metrics_addr;   // dsagent --metrics_addr for every agent; empty: none
  std::string tls_dir;        // dsagent --tls_dir for every agent (same path on every host); empty: none
  std::string allow_run_as;   // dsagent --allow_run_as for every agent (dslaunch --run_as); empty: none
  std::vector<std::string> ssh_command{"ssh"};  // host and the agent command are appended
  // Note [SLURM]: "--nodes=1 --ntasks=1 --nodelist=HOST" and the agent command are appended.
  std::vector<std::string> slurm_command{"srun", "--overlap"};
  std::chrono::milliseconds ready_timeout{20000};
};

// Not thread-safe; owned by main.
class AgentFleet {
 public:
  ~AgentFleet();

  // One dsagent per entry of `hosts` on this machine, listening on loopback.
  static absl::StatusOr<std::unique_ptr<AgentFleet>> StartLocal(
      const std::vector<std::string>& hosts, const AgentLaunchOptions& options);
  // One dsagent per host, started by `ssh_command HOST dsagent ...`; the agent
  // exits when that ssh session ends.
  static absl::StatusOr<std::unique_ptr<AgentFleet>> StartOverSsh(
      const std::vector<std::string>& hosts, const AgentLaunchOptions& options);
  // Note [SLURM]: one dsagent per host, each a job step of its own started by
  // `slurm_command --nodes=1 --ntasks=1 --nodelist=HOST dsagent ...`; the
  // agent exits when its stdin closes or the step is cancelled.
  static absl::StatusOr<std::unique_ptr<AgentFleet>> StartOverSlurm(
      const std::vector<std::string>& hosts, const AgentLaunchOptions& options);
  // Agents that already run at `addresses` (host:port each).
  static absl::StatusOr<std::unique_ptr<AgentFleet>> Existing(
      const std::vector<std::string>& addresses);

  const std::vector<AgentEndpoint>& endpoints() const { return endpoints_; }

 private:
  struct Started {
    pid_t pid = -1;
    int stdin_fd = -1;  // kept open: ssh agents exit when it closes
  };
  // Spawns `argv` (with `stdin_text` waiting on its stdin), waits for its
  // "DSAGENT_READY host:port" line, returns the port.
  absl::StatusOr<int> SpawnAndWaitReady(const std::string& host, const std::vector<std::string>& argv,
                                        const AgentLaunchOptions& options,
                                        const std::string& stdin_text = "");

  // One agent per host behind `remote(host)` (ssh HOST, srun ... --nodelist=HOST),
  // listening as `listen` (dsagent flags) says.
  static absl::StatusOr<std::unique_ptr<AgentFleet>> StartRemote(
      const std::vector<std::string>& hosts, const AgentLaunchOptions& options,
      const std::function<std::vector<std::string>(const std::string& host)>& remote,
      const std::vector<std::string>& listen);

  std::vector<AgentEndpoint> endpoints_;
  std::vector<Started> started_;
};

}  // namespace dslaunch
