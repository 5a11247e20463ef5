// The launch plan: which rank runs where, on which devices, with which
// environment. Pure: no I/O, so every rule here is unit-tested.
//
// Ranks are numbered host by host in hostfile order, then by slot, as the
// DeepSpeed launcher and torchrun do: rank = (ranks on earlier hosts) + local rank.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/resource_selection.h"

namespace dslaunch {

struct RankPlacement {
  int global_rank = 0;
  int node_index = 0;          // index into LaunchPlan::nodes (GROUP_RANK, CROSS_RANK)
  int local_rank = 0;
  int local_world_size = 0;
  int device = 0;              // the slot (GPU index) of this rank
};

struct LaunchPlan {
  std::vector<HostSlots> nodes;      // the hosts in use, in order
  std::vector<RankPlacement> ranks;  // indexed by global rank
  int world_size() const { return static_cast<int>(ranks.size()); }
  // "0,1,2,3": every device of the node, in slot order; every rank of a node
  // sees the same list and picks its own by LOCAL_RANK (what programs written
  // for the deepspeed launcher expect).
  std::string VisibleDevices(int node_index) const;
  std::vector<int> RanksOfNode(int node_index) const;
};

LaunchPlan BuildLaunchPlan(std::vector<HostSlots> nodes);

// What every rank's environment is made of besides its placement.
struct RankEnvironmentInputs {
  std::string master_addr;
  int master_port = 0;
  std::string store_addr;   // host:port of the controller's store
  std::string store_token;
  std::string job_id;
  int attempt = 0;          // also TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;
  // Variables passed to every rank unchanged (NCCL_*, .deepspeed_env, ...).
  // OMP_NUM_THREADS=1 is added unless this has it.
  std::map<std::string, std::string> passthrough;
};

// The full environment contract of one rank: Note [Rank environment contract]
// in common/store_client.h, plus torchrun's and DeepSpeed's variables. It is
// BuildNodeEnvironment of the rank's node overridden by BuildRankOwnEnvironment.
std::map<std::string, std::string> BuildRankEnvironment(const LaunchPlan& plan,
                                                        const RankPlacement& rank,
                                                        const RankEnvironmentInputs& inputs);

// Note [Environment once per node]: what every rank of a node shares (world
// sizes, MASTER_*, the store, CUDA_VISIBLE_DEVICES listing every slot of the
// node, the passthrough variables) and the few short variables that differ by
// rank (RANK, LOCAL_RANK, ROLE_RANK). StartRanks sends the first once per host
// and --dry_run prints it once per host, so both grow linearly with the number
// of ranks, not with its square (a host of N slots lists N devices).
std::map<std::string, std::string> BuildNodeEnvironment(const LaunchPlan& plan, int node_index,
                                                        const RankEnvironmentInputs& inputs);
std::map<std::string, std::string> BuildRankOwnEnvironment(const RankPlacement& rank);

// PROGRAM ARGS... with --local_rank=N (unless `no_local_rank`) where
// DeepSpeed's launcher puts it: right after the script, before the script's
// own arguments ("python3 -u train.py --local_rank=1 --lr 3e-4"; for another
// program, right after the program).
std::vector<std::string> BuildRankArgv(const std::vector<std::string>& program,
                                       const RankPlacement& rank, bool no_local_rank);
// Where the script's own arguments start: after the script for a python*
// interpreter (past its options, -m MODULE or -c CODE), else after argv[0].
size_t ScriptArgumentsStart(const std::vector<std::string>& program);

// The variables of `environ` that DeepSpeed exports to every rank: names with
// the prefixes NCCL, PYTHON, MLFLOW, MV2, UCX, plus OMP_NUM_THREADS and
// CUDA_DEVICE_MAX_CONNECTIONS when set.
std::map<std::string, std::string> SelectPassthroughVariables(char** environ);

// Reads KEY=VALUE lines of a .deepspeed_env file into `out` (later files
// override earlier ones). A missing file is not an error; a malformed line is,
// naming the file, line and text.
absl::Status ReadDeepspeedEnvFile(const std::string& path, std::map<std::string, std::string>* out);

}  // namespace dslaunch
