// A Prometheus scrape endpoint: GET /metrics on `address` answers with the
// families `collect()` returns at that moment, in Prometheus' text format.
// prometheus-cpp (Debian's prometheus-cpp-dev) serializes the families and
// serves them over its civetweb server (two threads), together with its own
// exposer_* families (scrapes served, bytes, latency). Off unless a
// --metrics_addr is given: the endpoint carries no authentication, so bind it
// to an address only the scraper reaches.
//
// The families are built from a snapshot at scrape time (a Collectable), not
// kept as live prometheus::Gauge objects: the controller's and the agent's
// figures already live in one place each (JobStatusBoard, AgentService), and
// a rank that ended must drop out of the next scrape rather than linger.
//
// Thread-safe: collect() is called on the server's threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/metric_family.h"

namespace prometheus {
class Exposer;
}

namespace dslaunch {

class PrometheusEndpoint {
 public:
  using CollectFamilies = std::function<std::vector<prometheus::MetricFamily>()>;

  // Listens on `address` ("host:port"; port 0 picks one; an empty host is
  // every interface) and serves until destroyed. `flag` names the option in
  // errors.
  static absl::StatusOr<std::unique_ptr<PrometheusEndpoint>> Start(const std::string& address, CollectFamilies collect,
                                                                   const std::string& flag);
  ~PrometheusEndpoint();

  int port() const { return port_; }
  // "http://host:port/metrics" with the port bound.
  std::string url() const { return url_; }

 private:
  class Collector;
  PrometheusEndpoint(std::unique_ptr<prometheus::Exposer> exposer, std::shared_ptr<Collector> collector,
                     std::string numeric_host, int port, std::string url);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string numeric_host_;  // what it listens on: "1.2.3.4", "[::1]", "0.0.0.0"
  std::shared_ptr<Collector> collector_;
  int port_;
  std::string url_;
};

}  // namespace dslaunch
