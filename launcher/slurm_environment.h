// What a SLURM allocation tells dslaunch (--launcher slurm).
//
// Note [SLURM]
// Inside an allocation (salloc, or an sbatch script on its batch host),
// `dslaunch --launcher slurm ...` takes its hosts from SLURM_JOB_NODELIST
// (SLURM's hostlist syntax, "gpu[01-04,07],login2") unless a hostfile is
// given, and each host's slots from --num_gpus, else SLURM_GPUS_ON_NODE,
// else SLURM_GPUS_PER_NODE ("8" or "gpu:h100:8"), else 1; --num_nodes,
// --include and --exclude select among them as from a hostfile. It starts
// one dsagent per host as a job step of its own,
//   <--slurm_command, default "srun --overlap"> --nodes=1 --ntasks=1
//       --nodelist=HOST dsagent ... --exit_on_stdin_eof
// (the ssh launcher's path with srun for ssh: the agent's ready line comes
// back through srun's stdout, and the agent ends when dslaunch closes its
// stdin or the step is cancelled). Add what the cluster needs to reach the
// GPUs to --slurm_command (e.g. "srun --overlap --gpus-per-node=8"). As with
// ssh, --token_file must name the same file on every host.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

// "gpu[01-03,07],login2" → gpu01 gpu02 gpu03 gpu07 login2; several bracket
// groups in one name multiply out ("r[1-2]n[1-2]" → r1n1 r1n2 r2n1 r2n2);
// leading zeros keep their width. `what` names the variable in errors.
absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(const std::string& hostlist, const std::string& what);

// A host's GPU count from SLURM_GPUS_ON_NODE or SLURM_GPUS_PER_NODE as SLURM
// writes them ("8", "gpu:8", "gpu:h100:8", "gpu:a100:2,gpu:v100:1" → 3); 0
// when neither says.
absl::StatusOr<int> SlurmGpusPerNode(const std::string& gpus_on_node, const std::string& gpus_per_node);

}  // namespace dslaunch
