// absl::Status <-> grpc::Status. The canonical codes are the same numbers, so
// the mapping is one-to-one (STYLE.md 1).
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace dslaunch {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace dslaunch
