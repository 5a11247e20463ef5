// Every communicator group a job's grid implies, planned once and in one
// order (Note [Process group order]): the world, the data-parallel groups
// (gradient reduction), the tensor-parallel groups, the pipelines, the
// model-parallel groups DeepSpeed uses for gradient norms and overflow checks
// (every rank of one data-parallel replica), and for mixture of experts the
// expert-parallel groups (experts split across them, all-to-all) and the
// expert-data-parallel groups (replicas of the same experts, gradient
// reduction of expert parameters).
//
// Membership follows DeepSpeed: the grid's groups as ProcessTopology lists
// them, and the expert groups as deepspeed/utils/groups.py's
// _create_expert_and_data_parallel cuts each data-parallel group: expert
// group i = data group ranks [i*E, (i+1)*E), expert-data group j = data group
// ranks j, j+E, j+2E, ...
//
// Note [Process group order]
// Groups are created through the rendezvous store, and creating one blocks
// until every member arrives. Every rank walks the same list in the same
// order and joins the groups it is a member of; the lowest group not yet
// complete then always has all its members waiting on it, so creation cannot
// deadlock, whatever subset of groups each rank belongs to.
//
// Pure value types; thread-safe for concurrent const use.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/topology/process_topology.h"

namespace dslaunch::runtime {

enum class GroupKind { kWorld, kData, kTensor, kPipeline, kModelParallel, kExpert, kExpertData };

// "world", "data", "tensor", "pipe", "model_parallel", "expert", "expert_data".
const char* GroupKindName(GroupKind kind);

struct PlannedGroup {
  GroupKind kind = GroupKind::kWorld;
  int index = 0;             // among the groups of its kind
  std::string name;          // "<kind>.<index>", "world" for the world; unique in the job
  std::vector<int> members;  // global ranks, ascending
};

// The parallel degrees of a job. data = world / (tensor * pipeline); expert
// divides data.
struct ParallelSizes {
  int tensor = 1;
  int pipeline = 1;
  int expert = 1;
};

// The grid of `world_size` ranks with these degrees; InvalidArgument naming
// the sizes when they do not divide the world (or expert the data size).
absl::StatusOr<ProcessTopology> TopologyFor(int world_size, const ParallelSizes& sizes);

// All groups of the job, in creation order (Note [Process group order]).
// REQUIRES: `expert` divides topology.data_size() (TopologyFor checks it).
std::vector<PlannedGroup> PlanProcessGroups(const ProcessTopology& topology, int expert);

// The groups of `plan` that hold `rank`, in plan order: one of each kind.
std::vector<PlannedGroup> GroupsOfRank(const std::vector<PlannedGroup>& plan, int rank);

}  // namespace dslaunch::runtime
