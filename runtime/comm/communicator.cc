#include "runtime/comm/communicator.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

// Defined by the backends (gloo_communicator.cc, nccl_communicator.cc).
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(StoreClient& store,
                                                                     const GroupSpec& group);
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(StoreClient& store,
                                                                     const GroupSpec& group);

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
