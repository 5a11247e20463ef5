#include "common/metrics_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net_address.h"

namespace dslaunch {
namespace {

constexpr int kRequestTimeoutMs = 5000;
constexpr size_t kMaxRequestBytes = 16 * 1024;

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away, or stopped reading for SO_SNDTIMEO
    done += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool head) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", head ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& address,
                                                                            std::function<std::string()> render,
                                                                            const std::string& flag) {
  auto parsed = ParseHostPort(address, flag);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = absl::StrCat(parsed->port);
  const int looked_up =
      ::getaddrinfo(parsed->host.empty() ? nullptr : parsed->host.c_str(), port_text.c_str(), &hints, &found);
  if (looked_up != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", address, ": ", ::gai_strerror(looked_up)));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    return absl::InternalError(absl::StrCat(flag, ": socket: ", std::strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // not SO_REUSEPORT: the port is ours alone
  const bool bound = ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 16) == 0;
  const int bind_errno = errno;
  ::freeaddrinfo(found);
  if (!bound) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(flag, " ", address, ": cannot listen: ", std::strerror(bind_errno)));
  }
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
  const int port = ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  const int wake = ::eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(flag, ": eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(fd, wake, port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd, int port, std::function<std::string()> render)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void MetricsHttpServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      // Out of descriptors (EMFILE, ENFILE): the listening socket stays
      // readable, so wait a little (or for the stop) rather than spin.
      if (errno != EINTR && errno != ECONNABORTED) {
        pollfd wake = {wake_fd_, POLLIN, 0};
        if (::poll(&wake, 1, 100) > 0) return;
      }
      continue;
    }
    // A client that stops reading cannot hold the thread (or the shutdown)
    // for longer than this per send.
    const timeval send_timeout = {kRequestTimeoutMs / 1000, 0};
    ::setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    Serve(connection);
    ::close(connection);
  }
}

void MetricsHttpServer::Serve(int connection) {
  // The request head, up to its blank line.
  std::string request;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || request.size() > kMaxRequestBytes) return;
    pollfd fds[2] = {{connection, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0 || fds[1].revents != 0) return;
    char buffer[4096];
    const ssize_t n = ::recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  const std::string text = "text/plain; charset=utf-8";
  ++served_;
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    WriteAll(connection, Response(400, "Bad Request", text, "not an HTTP/1.x request line\n", false));
    return;
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    WriteAll(connection, Response(405, "Method Not Allowed", text, "only GET and HEAD\n", false));
    return;
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    WriteAll(connection, Response(404, "Not Found", text, "the metrics are at /metrics\n", head));
    return;
  }
  WriteAll(connection, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(), head));
}

}  // namespace dslaunch
