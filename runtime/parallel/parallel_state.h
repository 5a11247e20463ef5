// The communicators of one rank: one per process group the job's grid
// implies (runtime/topology/process_groups.h), built once per rank by the
// bootstrap (runtime/api) and handed to the engine, which never builds or
// takes a bare communicator.
//
//   auto state = ParallelState::Create(world_size, rank, sizes, factory, &recorder);
//   Communicator* dp = (*state)->data();   // nullptr: this group is this rank alone
//
// A group of one member needs no communicator: its accessor returns nullptr
// and callers skip the collective. A group with the world's members shares
// the world's communicator (with only data parallelism, data() == world()),
// so no second connection set is opened for the same ranks. Every
// communicator is wrapped in the flight recorder when one is given (Note
// [Rank heartbeats]); the recorder numbers each group's calls separately.
//
// Thread-compatible: const accessors from any thread; each communicator is
// used by one thread at a time (runtime/comm/communicator.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"
#include "runtime/topology/process_groups.h"

namespace dslaunch::runtime {

class FlightRecorder;

class ParallelState {
 public:
  // Creates this rank's member of one group (all members call it with the
  // same spec); the real one is CreateCommunicator over the job's store.
  using GroupFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(const GroupSpec&)>;

  // Joins every group of `rank` in plan order (Note [Process group order]).
  // `recorder` may be null. Errors name the group that failed.
  static absl::StatusOr<std::shared_ptr<const ParallelState>> Create(int world_size, int rank,
                                                                    const ParallelSizes& sizes,
                                                                    const GroupFactory& factory,
                                                                    FlightRecorder* recorder);
  // Data parallelism over `data` (borrowed: it must outlive the state), or
  // one process when `data` is null. For tests and programs that built their
  // communicator themselves.
  static std::shared_ptr<const ParallelState> DataParallelOnly(Communicator* data);

  ParallelState(const ParallelState&) = delete;
  ParallelState& operator=(const ParallelState&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return topology_.world_size(); }
  const ProcessTopology& topology() const { return topology_; }
  ProcessCoord coordinate() const { return topology_.Coordinate(rank_); }
  int expert_size() const { return expert_size_; }

  // nullptr when the group holds only this rank.
  Communicator* world() const { return Get(GroupKind::kWorld); }
  Communicator* data() const { return Get(GroupKind::kData); }
  Communicator* tensor() const { return Get(GroupKind::kTensor); }
  Communicator* pipeline() const { return Get(GroupKind::kPipeline); }
  // DeepSpeed's model-parallel group: every rank of this rank's data-parallel
  // replica (all stages and tensor slices), for gradient norms and overflow.
  Communicator* model_parallel() const { return Get(GroupKind::kModelParallel); }
  Communicator* expert() const { return Get(GroupKind::kExpert); }
  Communicator* expert_data() const { return Get(GroupKind::kExpertData); }

  // This rank's group of `kind`, as planned (members and name).
  const PlannedGroup& group(GroupKind kind) const { return groups_.at(kind); }

  // "world=8 pipe=2 data=2 model=2 expert=1; rank 5: data.3 [5,7] tensor.2 [4,5] ..."
  std::string Describe() const;

 private:
  ParallelState(ProcessTopology topology, int rank, int expert_size)
      : topology_(topology), rank_(rank), expert_size_(expert_size) {}
  Communicator* Get(GroupKind kind) const {
    auto it = communicators_.find(kind);
    return it == communicators_.end() ? nullptr : it->second;
  }

  const ProcessTopology topology_;
  const int rank_;
  const int expert_size_;
  std::map<GroupKind, PlannedGroup> groups_;
  std::map<GroupKind, Communicator*> communicators_;  // absent: a group of one
  std::vector<std::unique_ptr<Communicator>> owned_;
};

}  // namespace dslaunch::runtime
