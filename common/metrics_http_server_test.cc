#include "common/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Sends `request` and reads the answer until the server closes.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) answer.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return answer;
}

TEST(MetricsHttpServer, ServesMetricsAndRefusesEverythingElse) {
  std::atomic<int> rendered{0};
  auto server = MetricsHttpServer::Start(
      "127.0.0.1:0", [&] { return "dslaunch_up " + std::to_string(++rendered) + "\n"; }, "--metrics_addr");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  std::string answer = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(answer, HasSubstr("Content-Length: 14\r\n"));
  EXPECT_THAT(answer, HasSubstr("\r\n\r\ndslaunch_up 1\n"));
  // Rendered anew for every scrape; a query string is ignored.
  EXPECT_THAT(Exchange(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n"), HasSubstr("dslaunch_up 2\n"));
  answer = Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("Content-Length: 14\r\n"));
  EXPECT_THAT(answer, Not(HasSubstr("dslaunch_up")));

  EXPECT_THAT(Exchange(port, "GET / HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(Exchange(port, "hello\r\n\r\n"), StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_EQ((*server)->served(), 6);
}

TEST(MetricsHttpServer, ASilentClientDoesNotKeepItFromStopping) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); }, "--metrics_addr");
  ASSERT_TRUE(server.ok()) << server.status();
  const int silent = Connect((*server)->port());
  server->reset();  // returns although the client never sends its request
  ::close(silent);
}

TEST(MetricsHttpServer, BadAddressesNameTheFlag) {
  auto bad = MetricsHttpServer::Start("9400", [] { return std::string(); }, "--metrics_addr");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--metrics_addr"));
  auto first = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); }, "--metrics_addr");
  ASSERT_TRUE(first.ok());
  auto taken = MetricsHttpServer::Start("127.0.0.1:" + std::to_string((*first)->port()),
                                        [] { return std::string(); }, "--metrics_addr");
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(std::string(taken.status().message()), HasSubstr("cannot listen"));
}

}  // namespace
}  // namespace dslaunch
