#include "runtime/comm/communicator.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

// Defined by the backends (gloo_communicator.cc, nccl_communicator.cc).
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(StoreClient& store,
                                                                     const GroupSpec& group);
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(StoreClient& store,
                                                                     const GroupSpec& group);

absl::StatusOr<int> IndexInGroup(const GroupSpec& group) {
  for (size_t i = 0; i < group.members.size(); ++i) {
    if (group.members[i] == group.global_rank) return static_cast<int>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", group.global_rank, " is not a member of group ", group.name));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(CommBackend backend,
                                                                 StoreClient& store,
                                                                 const GroupSpec& group) {
  if (group.members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", group.name, " has no members"));
  }
  switch (backend) {
    case CommBackend::kNccl:
      return CreateNcclCommunicator(store, group);
    default:
      return CreateGlooCommunicator(store, group);
  }
}

}  // namespace dslaunch::runtime
