// Note [Rank environment contract]
// Everything the controller (dslaunch), the agent (dsagent) and a rank
// process (dsrank, a C++ API program, any user program) share, defined once:
// the environment variables a rank is started with and the keys of the
// rendezvous store they exchange. docs/control-plane.md lists the same table
// for users; a name appears in code only through these constants.
//
// Who sets what:
//   launcher (launch_plan.cc)  torchrun's and DeepSpeed's variables, and
//                              DSLAUNCH_JOB_ID/ATTEMPT/STORE_ADDR/STORE_TOKEN/ENV_VERSION
//   launcher (per job)         DSLAUNCH_HEARTBEAT_MS, DSLAUNCH_ELASTIC, DSLAUNCH_RESUME_TAG
//   agent (agent_service.cc)   DSLAUNCH_AGENT_ADDR, DSLAUNCH_RANK_TOKEN (heartbeats)
//
// Versioning: kEnvVersion changes only when a variable changes meaning or
// disappears; adding one keeps the version. A rank refuses a version newer
// than its own (ReadRankEnvironment), so an old dsrank never misreads a new
// launcher's contract.
//
// The process's side is one reader, ReadRankEnvironment, which returns every
// value in one struct and names the first malformed variable.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace dslaunch {

namespace rank_env {

inline constexpr int kEnvVersion = 1;

// torchrun's contract.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
// DeepSpeed's launcher's additions.
inline constexpr char kCrossRank[] = "CROSS_RANK";
inline constexpr char kCrossSize[] = "CROSS_SIZE";
inline constexpr char kLocalSize[] = "LOCAL_SIZE";
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";

// Ours.
inline constexpr char kJobId[] = "DSLAUNCH_JOB_ID";
inline constexpr char kAttempt[] = "DSLAUNCH_ATTEMPT";
inline constexpr char kStoreAddr[] = "DSLAUNCH_STORE_ADDR";
inline constexpr char kStoreToken[] = "DSLAUNCH_STORE_TOKEN";
inline constexpr char kEnvVersionName[] = "DSLAUNCH_ENV_VERSION";
inline constexpr char kAgentAddr[] = "DSLAUNCH_AGENT_ADDR";
inline constexpr char kRankToken[] = "DSLAUNCH_RANK_TOKEN";
inline constexpr char kHeartbeatMs[] = "DSLAUNCH_HEARTBEAT_MS";
// The agent's --tls_dir (Note [Mutual TLS], common/tls_files.h): the rank
// reaches the store and its agent over TLS with the host's certificate.
inline constexpr char kTlsDir[] = "DSLAUNCH_TLS_DIR";
// "1" in a job with elastic bounds (Note [Elastic batch]).
inline constexpr char kElastic[] = "DSLAUNCH_ELASTIC";
// The checkpoint the controller recorded as committed (Note [Committed checkpoints]).
inline constexpr char kResumeTag[] = "DSLAUNCH_RESUME_TAG";

// Tunables a user may set for a rank (not set by dslaunch).
inline constexpr char kCpuAdamIsa[] = "DSLAUNCH_CPU_ADAM_ISA";
inline constexpr char kCpuAdamThreads[] = "DSLAUNCH_CPU_ADAM_THREADS";
// Set (any value): NVMe offload reads and writes its swap files with
// pread/pwrite instead of io_uring (Note [NVMe offload]).
inline constexpr char kNoIoUring[] = "DSLAUNCH_NO_IO_URING";

}  // namespace rank_env

// Note [Store keys of the rank contract]
// The keys that the controller and ranks share in the rendezvous store. All
// live in the namespace of one job attempt.
//
//   control/preempt       controller -> ranks: save a checkpoint at the next step and stop (Note [Preemption])
//   progress/step         rank 0 -> controller: "step N", before heartbeats carry progress
//   checkpoint/committed  rank 0 -> controller: the tag of the last committed checkpoint (Note [Committed checkpoints])
//   data/ready            rank 0 -> ranks: "ok", or why the dataset could not be prepared
//   comm/<group>/...      members of one communicator: its rendezvous (runtime/comm)
namespace store_keys {

inline constexpr char kPreempt[] = "control/preempt";
inline constexpr char kProgressStep[] = "progress/step";
inline constexpr char kCheckpointCommitted[] = "checkpoint/committed";
inline constexpr char kDataReady[] = "data/ready";

}  // namespace store_keys

// What a rank process reads of the contract.
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK
  int num_nodes = 1;  // GROUP_WORLD_SIZE
  int env_version = 0;  // 0: not started by dslaunch

  // Set by dslaunch (empty / 0 otherwise).
  std::string job_id;
  int attempt = 0;
  std::string store_addr;
  std::string store_token;
  // Set by the rank's dsagent, for heartbeats.
  std::string agent_addr;
  std::string rank_token;
  int heartbeat_ms = 1000;
  bool elastic = false;
  std::string resume_tag;
  std::string tls_dir;  // empty: plaintext

  // Whether the rendezvous store can be reached (dslaunch started this rank).
  bool has_store() const { return !store_addr.empty(); }
  // Whether this rank can heartbeat to an agent.
  bool has_agent() const { return !agent_addr.empty() && !rank_token.empty(); }
};

// Reads the contract through `lookup` (nullptr: unset). Unset variables take
// the one-process defaults above. InvalidArgument naming the variable and
// its value when one is malformed (not an integer, negative, RANK not below
// WORLD_SIZE, LOCAL_RANK not below LOCAL_WORLD_SIZE, a newer
// DSLAUNCH_ENV_VERSION); FailedPrecondition naming it when a store address
// comes without its token, job id or attempt.
using EnvLookup = std::function<const char*(const char* name)>;
absl::StatusOr<RankEnvironment> ParseRankEnvironment(const EnvLookup& lookup);
// The same over this process's environment.
absl::StatusOr<RankEnvironment> ReadRankEnvironment();

}  // namespace dslaunch
