#include "runtime/comm/peer_failure.h"

#include "absl/strings/cord.h"

namespace dslaunch::runtime {
namespace {

constexpr char kPeerFailureUrl[] = "dslaunch/peer-failure";

}  // namespace

absl::Status PeerFailureError(const std::string& message) {
  absl::Status status = absl::AbortedError(message);
  status.SetPayload(kPeerFailureUrl, absl::Cord("1"));
  return status;
}

bool IsPeerFailure(const absl::Status& status) { return status.GetPayload(kPeerFailureUrl).has_value(); }

}  // namespace dslaunch::runtime
