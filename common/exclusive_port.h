// Every gRPC server of the control plane (agents, the controller's store)
// owns its port alone.
//
// gRPC turns SO_REUSEPORT on by default: a second server (a stale dsagent, or
// someone else's) could then bind the same address, print that it is ready,
// and the kernel would split incoming connections between the two, so part
// of the jobs would reach a stranger. With port sharing off, the second bind
// fails and its server refuses to start.
#pragma once

#include <grpcpp/server_builder.h>

namespace dslaunch {

inline void RefusePortSharing(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

}  // namespace dslaunch
