// Host/port helpers shared by the controller and the agent.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dslaunch {

struct HostPort {
  std::string host;
  int port = 0;
  std::string ToString() const;  // "host:port", with [] around IPv6 literals
};

// Parses "host:port" or "[v6]:port". `what` names the flag or field in errors.
absl::StatusOr<HostPort> ParseHostPort(const std::string& text, const std::string& what);

// Asks the kernel for a free TCP port on `bind_host` (all interfaces when
// empty) by binding port 0. The port is released before returning; another
// process may still take it, which callers that bind it soon accept.
absl::StatusOr<int> PickFreePort(const std::string& bind_host = "");

// The local IP address that the kernel would use to reach `remote_host` (a
// UDP "connect", which sends nothing). This is the address peers on that
// network can reach us at.
absl::StatusOr<std::string> LocalAddressToward(const std::string& remote_host);

// True for "localhost", 127.0.0.0/8 and ::1.
bool IsLoopbackHost(const std::string& host);

}  // namespace dslaunch
