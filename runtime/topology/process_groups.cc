#include "runtime/topology/process_groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

void AddGroups(GroupKind kind, std::vector<std::vector<int>> groups, std::vector<PlannedGroup>* plan) {
  for (size_t i = 0; i < groups.size(); ++i) {
    PlannedGroup group;
    group.kind = kind;
    group.index = static_cast<int>(i);
    group.name = absl::StrCat(GroupKindName(kind), ".", i);
    group.members = std::move(groups[i]);
    std::sort(group.members.begin(), group.members.end());
    plan->push_back(std::move(group));
  }
}

}  // namespace

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld: return "world";
    case GroupKind::kData: return "data";
    case GroupKind::kTensor: return "tensor";
    case GroupKind::kPipeline: return "pipe";
    case GroupKind::kModelParallel: return "model_parallel";
    case GroupKind::kExpert: return "expert";
    case GroupKind::kExpertData: return "expert_data";
  }
  return "unknown";
}

absl::StatusOr<ProcessTopology> TopologyFor(int world_size, const ParallelSizes& sizes) {
  absl::StatusOr<ProcessTopology> topology = ProcessTopology::FromWorld(world_size, sizes.tensor, sizes.pipeline);
  if (!topology.ok()) return topology.status();
  if (sizes.expert < 1 || topology->data_size() % sizes.expert != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the expert-parallel size ", sizes.expert, " must be positive and divide the data-parallel size ",
        topology->data_size(), " (world ", world_size, " / tensor ", sizes.tensor, " / pipeline ",
        sizes.pipeline, ")"));
  }
  return topology;
}

std::vector<PlannedGroup> PlanProcessGroups(const ProcessTopology& topology, int expert) {
  std::vector<PlannedGroup> plan;
  PlannedGroup world;
  world.kind = GroupKind::kWorld;
  world.name = "world";
  for (int r = 0; r < topology.world_size(); ++r) world.members.push_back(r);
  plan.push_back(std::move(world));
  const std::vector<std::vector<int>> data = topology.DataParallelGroups();
  AddGroups(GroupKind::kData, data, &plan);
  AddGroups(GroupKind::kTensor, topology.ModelParallelGroups(), &plan);
  AddGroups(GroupKind::kPipeline, topology.PipelineGroups(), &plan);
  AddGroups(GroupKind::kModelParallel, topology.ModelPipeGroups(), &plan);
  std::vector<std::vector<int>> experts, expert_data;
  for (const std::vector<int>& replicas : data) {
    const int size = static_cast<int>(replicas.size());
    for (int first = 0; first < size; first += expert) {
      experts.emplace_back(replicas.begin() + first, replicas.begin() + first + expert);
    }
    for (int offset = 0; offset < expert; ++offset) {
      std::vector<int> same_experts;
      for (int i = offset; i < size; i += expert) same_experts.push_back(replicas[i]);
      expert_data.push_back(std::move(same_experts));
    }
  }
  AddGroups(GroupKind::kExpert, std::move(experts), &plan);
  AddGroups(GroupKind::kExpertData, std::move(expert_data), &plan);
  return plan;
}

std::vector<PlannedGroup> GroupsOfRank(const std::vector<PlannedGroup>& plan, int rank) {
  std::vector<PlannedGroup> mine;
  for (const PlannedGroup& group : plan) {
    if (std::binary_search(group.members.begin(), group.members.end(), rank)) mine.push_back(group);
  }
  return mine;
}

}  // namespace dslaunch::runtime
