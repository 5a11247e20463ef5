#include "common/prometheus_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/rank_metric_families.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Sends `request` to 127.0.0.1:port and reads the answer until the server
// closes (every request here asks it to).
std::string Exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) answer.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return answer;
}

TEST(PrometheusEndpoint, ServesTheFamiliesOfTheMomentAtMetricsOnly) {
  std::atomic<int> collected{0};
  auto endpoint = PrometheusEndpoint::Start(
      "127.0.0.1:0",
      [&] {
        std::vector<prometheus::MetricFamily> families;
        AddMetricSample(AddMetricFamily(families, "dslaunch_up", prometheus::MetricType::Gauge, "scrapes so far"),
                        {{"job_id", "a\"b"}}, ++collected);
        return families;
      },
      "--metrics_addr");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*endpoint)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");

  std::string answer = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("# TYPE dslaunch_up gauge\n"));
  EXPECT_THAT(answer, HasSubstr("dslaunch_up{job_id=\"a\\\"b\"} 1\n"));
  // Collected anew for every scrape.
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.0\r\n\r\n"), HasSubstr("dslaunch_up{job_id=\"a\\\"b\"} 2\n"));
  EXPECT_THAT(Exchange(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n"), StartsWith("HTTP/1.1 404"));
  EXPECT_EQ(collected.load(), 2);
  // Stopping after scrapes is prompt (civetweb alone waited out a 2 s poll);
  // a generous bound for a loaded machine.
  const auto before = std::chrono::steady_clock::now();
  endpoint->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(1500));
}

TEST(PrometheusEndpoint, BadAddressesNameTheFlag) {
  auto none = [] { return std::vector<prometheus::MetricFamily>(); };
  auto bad = PrometheusEndpoint::Start("9400", none, "--metrics_addr");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--metrics_addr"));
  // Not an address civetweb could bind; it would not say so itself.
  auto impossible = PrometheusEndpoint::Start("999.1.1.1:0", none, "--metrics_addr");
  ASSERT_FALSE(impossible.ok());
  EXPECT_THAT(std::string(impossible.status().message()), HasSubstr("--metrics_addr 999.1.1.1:0"));
  auto first = PrometheusEndpoint::Start("127.0.0.1:0", none, "--metrics_addr");
  ASSERT_TRUE(first.ok());
  auto taken = PrometheusEndpoint::Start("127.0.0.1:" + std::to_string((*first)->port()), none, "--metrics_addr");
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(std::string(taken.status().message()), HasSubstr("cannot listen"));
}

}  // namespace
}  // namespace dslaunch
