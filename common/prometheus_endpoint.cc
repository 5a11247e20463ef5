#include "common/prometheus_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace dslaunch {

class PrometheusEndpoint::Collector : public prometheus::Collectable {
 public:
  explicit Collector(CollectFamilies collect) : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  const CollectFamilies collect_;
};

namespace {

// The numeric form of `host` that civetweb's listening_ports takes:
// "1.2.3.4" or "[::1]". civetweb would otherwise take a name it cannot
// resolve, or an impossible address, without a word.
absl::StatusOr<std::string> NumericListenHost(const std::string& host, const std::string& address,
                                              const std::string& flag) {
  if (host.empty()) return std::string("0.0.0.0");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int looked_up = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (looked_up != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", address, ": ", ::gai_strerror(looked_up)));
  }
  char text[INET6_ADDRSTRLEN] = {};
  std::string numeric;
  if (found->ai_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr, text, sizeof(text));
    numeric = absl::StrCat("[", text, "]");
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof(text));
    numeric = text;
  }
  ::freeaddrinfo(found);
  return numeric;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrometheusEndpoint>> PrometheusEndpoint::Start(const std::string& address,
                                                                               CollectFamilies collect,
                                                                               const std::string& flag) {
  auto parsed = ParseHostPort(address, flag);
  if (!parsed.ok()) return parsed.status();
  auto host = NumericListenHost(parsed->host, address, flag);
  if (!host.ok()) return host.status();
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(absl::StrCat(*host, ":", parsed->port));
  } catch (const std::exception& e) {
    // civetweb says only "null context ... problem binding to port".
    return absl::UnavailableError(
        absl::StrCat(flag, " ", address, ": cannot listen (the port is taken, or the address is not this host's)"));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(absl::StrCat(flag, " ", address, ": cannot listen"));
  auto collector = std::make_shared<Collector>(std::move(collect));
  exposer->RegisterCollectable(collector, "/metrics");
  const std::string shown_host = parsed->host.empty() ? std::string("0.0.0.0") : parsed->host;
  std::string url = absl::StrCat("http://", HostPort{shown_host, ports[0]}.ToString(), "/metrics");
  return std::unique_ptr<PrometheusEndpoint>(
      new PrometheusEndpoint(std::move(exposer), std::move(collector), *host, ports[0], std::move(url)));
}

PrometheusEndpoint::PrometheusEndpoint(std::unique_ptr<prometheus::Exposer> exposer,
                                       std::shared_ptr<Collector> collector, std::string numeric_host, int port,
                                       std::string url)
    : exposer_(std::move(exposer)),
      collector_(std::move(collector)),
      numeric_host_(std::move(numeric_host)),
      port_(port),
      url_(std::move(url)) {}

// The server stops (joining its threads) before the collector goes.
//
// civetweb 1.15's listening thread notices the stop only when its poll()
// returns, which it does every 2 s (SOCKET_TIMEOUT_QUANTUM) or on a
// connection: once it has served a scrape, stopping took 2 s, and dslaunch
// (or an agent, and so dslaunch) would exit that much later. A connection
// every 20 ms while it stops wakes it: the stop takes tens of milliseconds.
PrometheusEndpoint::~PrometheusEndpoint() {
  std::string host = numeric_host_ == "0.0.0.0" ? "127.0.0.1" : numeric_host_;
  const bool v6 = !host.empty() && host.front() == '[';
  if (v6) host = host.substr(1, host.size() - 2);
  sockaddr_storage address{};
  socklen_t length = 0;
  if (v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port_));
    ::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr);
    length = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&address);
    in4->sin_family = AF_INET;
    in4->sin_port = htons(static_cast<uint16_t>(port_));
    ::inet_pton(AF_INET, host.c_str(), &in4->sin_addr);
    length = sizeof(sockaddr_in);
  }
  std::mutex mu;
  std::condition_variable stopped_cv;
  bool stopped = false;
  std::thread waker([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopped) {
      const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        (void)::connect(fd, reinterpret_cast<const sockaddr*>(&address), length);
        ::close(fd);
      }
      stopped_cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopped; });
    }
  });
  exposer_.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    stopped = true;
  }
  stopped_cv.notify_all();
  waker.join();
}

}  // namespace dslaunch
