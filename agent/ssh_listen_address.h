// Where an agent started over ssh listens (dsagent --listen_on_ssh_address):
// the address of this host that the ssh connection arrived at, the third
// field of SSH_CONNECTION ("client_ip client_port server_ip server_port").
// The controller reached the host there, so it reaches the agent there too,
// and nothing listens on the host's other interfaces. (The host's own name
// is no substitute: Debian maps it to 127.0.1.1 in /etc/hosts.)
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dslaunch {

// `ssh_connection` is SSH_CONNECTION's value, or null when it is not set.
absl::StatusOr<std::string> ListenHostFromSshConnection(const char* ssh_connection);

}  // namespace dslaunch
