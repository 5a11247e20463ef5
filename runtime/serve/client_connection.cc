// Note [A non-streaming client that goes away].
#include "runtime/serve/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace dslaunch::runtime {
namespace {

// The address and port of `address` as httplib writes a request's.
bool Endpoint(const sockaddr_storage& address, socklen_t length, std::string* host, int* port) {
  if (address.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  } else if (address.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  } else {
    return false;
  }
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, text, sizeof(text), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  *host = text;
  return true;
}

bool HasEndpoints(int fd, const ConnectionEndpoints& wanted) {
  struct stat status;
  if (fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) return false;
  sockaddr_storage address;
  socklen_t length = sizeof(address);
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      !Endpoint(address, length, &host, &port) || port != wanted.local_port || host != wanted.local_address) {
    return false;
  }
  length = sizeof(address);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0 &&
         Endpoint(address, length, &host, &port) && port == wanted.remote_port && host == wanted.remote_address;
}

}  // namespace

std::optional<ClientConnection> ClientConnection::Find(const ConnectionEndpoints& endpoints) {
  DIR* descriptors = opendir("/proc/self/fd");
  if (descriptors == nullptr) return std::nullopt;
  std::optional<ClientConnection> found;
  while (const dirent* entry = readdir(descriptors)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(descriptors)) continue;
    if (HasEndpoints(static_cast<int>(fd), endpoints)) {
      found = ClientConnection(static_cast<int>(fd));
      break;
    }
  }
  closedir(descriptors);
  return found;
}

bool ClientConnection::PeerClosed() const {
  char byte;
  for (;;) {
    const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;   // a byte waits: the client is there
    if (n == 0) return true;   // end of file: it closed its side
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;  // a reset or another error: gone
  }
}

}  // namespace dslaunch::runtime
