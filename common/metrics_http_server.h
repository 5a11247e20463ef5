// A small HTTP/1.1 server for Prometheus scrapes: GET (or HEAD) /metrics
// answers with the text `render()` returns, as
// "text/plain; version=0.0.4; charset=utf-8"; any other path is 404 and any
// other method 405. One connection at a time on one thread, each closed
// after its answer (Connection: close); a client that sends no complete
// request within 5 s, or stops reading the answer for 5 s, is dropped:
// scrapes come every few seconds, and a slow or silent client cannot hold the
// thread, or the server's shutdown, for long.
//
// Why not a library: prometheus-cpp (with its civetweb) is not in Debian
// bookworm, and a scrape needs only this much HTTP.
//
// Thread-safe: render() is called on the server's thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace dslaunch {

class MetricsHttpServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks one; flag names the
  // option in errors) and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                 std::function<std::string()> render,
                                                                 const std::string& flag);
  ~MetricsHttpServer();

  int port() const { return port_; }
  // Requests answered so far (tests).
  int64_t served() const { return served_.load(); }

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, int port, std::function<std::string()> render);
  void Loop();
  void Serve(int connection);

  const int listen_fd_;
  const int wake_fd_;  // an eventfd: written to stop the loop
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<int64_t> served_{0};
  std::thread thread_;
};

}  // namespace dslaunch
