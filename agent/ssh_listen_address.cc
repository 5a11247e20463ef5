#include "agent/ssh_listen_address.h"

#include <arpa/inet.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dslaunch {

absl::StatusOr<std::string> ListenHostFromSshConnection(const char* ssh_connection) {
  if (ssh_connection == nullptr) {
    return absl::FailedPreconditionError(
        "--listen_on_ssh_address: SSH_CONNECTION is not set (dsagent was not started by sshd); pass --listen");
  }
  const std::vector<std::string> fields = absl::StrSplit(ssh_connection, ' ', absl::SkipEmpty());
  if (fields.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("--listen_on_ssh_address: SSH_CONNECTION '", ssh_connection,
                                                   "' is not 'client_ip client_port server_ip server_port'"));
  }
  const std::string& server = fields[2];
  unsigned char bytes[16];
  if (::inet_pton(AF_INET, server.c_str(), bytes) != 1 && ::inet_pton(AF_INET6, server.c_str(), bytes) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen_on_ssh_address: SSH_CONNECTION's server address '", server, "' is not an IP address"));
  }
  return server;
}

}  // namespace dslaunch
