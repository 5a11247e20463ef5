#include "runtime/parallel/parallel_state.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/comm/flight_recorder.h"

namespace dslaunch::runtime {

absl::StatusOr<std::shared_ptr<const ParallelState>> ParallelState::Create(int world_size, int rank,
                                                                          const ParallelSizes& sizes,
                                                                          const GroupFactory& factory,
                                                                          FlightRecorder* recorder) {
  absl::StatusOr<ProcessTopology> topology = TopologyFor(world_size, sizes);
  if (!topology.ok()) return topology.status();
  if (!topology->ContainsRank(rank)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in a world of ", world_size));
  }
  std::shared_ptr<ParallelState> state(new ParallelState(*topology, rank, sizes.expert));
  Communicator* world = nullptr;
  for (PlannedGroup& group : GroupsOfRank(PlanProcessGroups(*topology, sizes.expert), rank)) {
    const GroupKind kind = group.kind;
    if (group.members.size() > 1) {
      if (kind != GroupKind::kWorld && group.members.size() == static_cast<size_t>(world_size)) {
        state->communicators_[kind] = world;  // the same ranks: share the world's connections
      } else {
        absl::StatusOr<std::unique_ptr<Communicator>> comm = factory(GroupSpec{group.name, group.members, rank});
        if (!comm.ok()) {
          return absl::Status(comm.status().code(),
                              absl::StrCat("process group ", group.name, ": ", comm.status().message()));
        }
        std::unique_ptr<Communicator> owned = std::move(*comm);
        if (recorder != nullptr) {
          owned = std::make_unique<RecordingCommunicator>(std::move(owned), recorder, group.name);
        }
        state->communicators_[kind] = owned.get();
        if (kind == GroupKind::kWorld) world = owned.get();
        state->owned_.push_back(std::move(owned));
      }
    }
    state->groups_[kind] = std::move(group);
  }
  return std::shared_ptr<const ParallelState>(std::move(state));
}

std::shared_ptr<const ParallelState> ParallelState::DataParallelOnly(Communicator* data) {
  const int world_size = data == nullptr ? 1 : data->size();
  const int rank = data == nullptr ? 0 : data->rank();
  absl::StatusOr<ProcessTopology> topology = ProcessTopology::Create(1, world_size, 1);
  std::shared_ptr<ParallelState> state(new ParallelState(*topology, rank, 1));
  for (PlannedGroup& group : GroupsOfRank(PlanProcessGroups(*topology, 1), rank)) {
    if (group.members.size() > 1) state->communicators_[group.kind] = data;
    state->groups_[group.kind] = std::move(group);
  }
  return state;
}

std::string ParallelState::Describe() const {
  std::string text = absl::StrCat("world=", world_size(), " ", topology_.ToString(), " expert=", expert_size_,
                                  "; rank ", rank_, ":");
  for (const auto& [kind, group] : groups_) {
    if (kind == GroupKind::kWorld) continue;
    absl::StrAppend(&text, " ", group.name, " [", absl::StrJoin(group.members, ","), "]");
  }
  return text;
}

}  // namespace dslaunch::runtime
