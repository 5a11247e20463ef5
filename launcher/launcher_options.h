// Command line of dslaunch: `dslaunch [options] PROGRAM [ARGS...]`.
//
// This is the controller's one config registry (STYLE.md 7): every option is
// one row of the table in launcher_options.cc with its name, default and doc,
// and --help is generated from that table. Option names follow DeepSpeed's
// launcher where it has one.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/control_plane_defaults.h"

namespace dslaunch {

enum class LauncherKind {
  kAuto,    // local when every host is this machine, ssh otherwise, static with --agents
  kLocal,   // the controller starts dsagent processes on this machine
  kSsh,     // the controller starts dsagent on each host over ssh
  kStatic,  // agents already run; --agents lists them
  kSlurm,   // the controller starts dsagent on each host of a SLURM allocation with srun (Note [SLURM])
};

struct LauncherOptions {
  std::string hostfile;           // --hostfile PATH
  bool hostfile_given = false;    // true when --hostfile was on the command line
  int num_nodes = -1;             // --num_nodes N or the MAX of MIN:MAX (-1: not given)
  int min_nodes = -1;             // --min_nodes N or the MIN of --num_nodes MIN:MAX (-1: not elastic)
  int num_gpus = -1;              // --num_gpus G (-1: not given)
  std::string include;            // -i / --include
  std::string exclude;            // -e / --exclude
  std::string master_addr;        // --master_addr (empty: rank 0's host)
  int master_port = 0;            // --master_port (0: picked by rank 0's agent)
  bool no_local_rank = false;     // --no_local_rank
  std::string log_dir;            // --log_dir DIR
  std::string resume_job;         // --resume_job JOB_DIR (Note [Controller failover])
  bool journal = false;           // --journal (Note [Controller failover])
  std::set<int> console_ranks;    // --console_ranks 0,3-5 (empty: all ranks)
  bool no_prefix = false;         // --no_prefix: console lines without [host:rank]
  LauncherKind launcher = LauncherKind::kAuto;  // --launcher local|ssh|static
  std::vector<std::string> agents;  // --agents host:port,host:port
  std::string token_file;         // --token_file F
  std::string tls_dir;            // --tls_dir DIR: Note [Mutual TLS] (common/tls_files.h)
  int max_restarts = 0;           // --max_restarts N
  int64_t restart_backoff_ms = 1000;       // --restart_backoff_ms: wait before restart 1, doubling
  int64_t max_restart_backoff_ms = kDefaultMaxRestartBackoffMs;  // --max_restart_backoff_ms: cap of that wait
  bool dry_run = false;           // --dry_run
  std::string job_id;             // --job_id ID (empty: generated)
  int64_t stop_grace_ms = kDefaultStopGraceMs; // --stop_grace_ms: SIGTERM -> SIGKILL grace
  int64_t lease_ms = kDefaultLeaseMs; // --lease_ms: agents stop ranks after this long without the controller
  // --preempt_grace_ms: 0 stops at once. Job files checkpoint within it on
  // SIGTERM/SIGUSR1 by default; a plain program only when the flag is given
  // (it polls control/preempt itself, e.g. python/dslaunch's
  // preempt_requested()), else it is stopped at once.
  int64_t preempt_grace_ms = kDefaultPreemptGraceMs;
  bool preempt_grace_given = false;
  int64_t rejoin_check_ms = 0;           // --rejoin_check_ms: elastic; 0: lost hosts rejoin at restarts
  int blacklist_after = 0;               // --blacklist_after N: elastic; 0: off
  int64_t blacklist_cooldown_ms = kDefaultBlacklistCooldownMs;  // --blacklist_cooldown_ms
  int64_t heartbeat_timeout_ms = kDefaultHeartbeatTimeoutMs;  // --heartbeat_timeout_ms: a frozen rank is a hang; 0: off
  int64_t hang_timeout_ms = 0;    // --hang_timeout_ms: 0: off; armed by the first reported step
  std::string agent_binary;       // --agent_binary (empty: dsagent beside dslaunch, then PATH)
  std::string ssh_command = "ssh";  // --ssh_command (split on spaces; host and command appended)
  std::string slurm_command = "srun --overlap";  // --slurm_command (Note [SLURM], launcher/slurm_environment.h)
  std::string controller_addr;    // --controller_addr: address ranks use to reach the store
  bool bind_cores_to_rank = false;  // --bind_cores_to_rank (Note [Core binding])
  bool force_multi = false;         // --force_multi: the ssh launcher even for this host alone
  std::string bind_core_list;       // --bind_core_list 1,3-5,7
  std::string run_as;               // --run_as USER: Note [Ranks as another user]
  std::string metrics_addr;       // --metrics_addr HOST:PORT: Prometheus /metrics (Note [Live job status])
  std::string agent_metrics_addr; // --agent_metrics_addr HOST:PORT: each started agent's /metrics
  std::string validate;           // --validate FILE: check a job file or ds_config, start nothing
  std::vector<std::string> overrides;  // --override key.path=value (repeatable)
  bool help = false;              // -h / --help
  bool version = false;           // --version
  std::vector<std::string> program;  // PROGRAM ARGS... (everything after the first non-option)
};

// Parses argv (argv[0] is skipped). Options come before PROGRAM; the first
// argument that is not an option, or everything after "--", is the program and
// its arguments, passed through untouched. Accepts "--name value" and
// "--name=value". Errors name the flag and the bad value: unknown flag (with the
// nearest known flag), missing value, non-numeric or negative number, unknown
// --launcher kind, bad --console_ranks list, --agents with --launcher local or
// ssh, --launcher static without --agents, and no PROGRAM unless --help.
// --agents alone implies
// --launcher static.
absl::StatusOr<LauncherOptions> ParseLauncherOptions(const std::vector<std::string>& argv);

// The --help text, generated from the option table.
std::string LauncherUsage();

}  // namespace dslaunch
