// Note [A non-streaming client that goes away].
#include "runtime/serve/client_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

int PortOf(int fd, bool peer) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  EXPECT_EQ(rc, 0);
  return ntohs(address.sin_port);
}

// Waits (up to a minute) until the client's close reached `fd`: on a busy
// machine the loopback may deliver it after close() returned.
void AwaitHangUp(int fd) {
  pollfd event{fd, POLLRDHUP, 0};
  ASSERT_EQ(poll(&event, 1, 60'000), 1);
}

// A listening socket on 127.0.0.1, a client connected to it and the
// server's end of that connection.
struct Loopback {
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    server = accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~Loopback() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
  // What httplib gives the handler of a request that came on `server`.
  ConnectionEndpoints ServerSide() const {
    return {"127.0.0.1", PortOf(server, false), "127.0.0.1", PortOf(server, true)};
  }
  int listener = -1, client = -1, server = -1;
};

TEST(ClientConnectionTest, FindsTheServerSocketOfTheConnectionByItsEndpoints) {
  Loopback one, two;
  auto found = ClientConnection::Find(two.ServerSide());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->descriptor(), two.server);
  // The client's socket has the same two endpoints the other way round.
  ConnectionEndpoints reversed = two.ServerSide();
  std::swap(reversed.local_port, reversed.remote_port);
  found = ClientConnection::Find(reversed);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->descriptor(), two.client);
  ConnectionEndpoints other_host = one.ServerSide();
  other_host.remote_address = "127.0.0.2";
  EXPECT_FALSE(ClientConnection::Find(other_host).has_value());
}

TEST(ClientConnectionTest, NoSocketOnceItIsClosed) {
  Loopback connection;
  const ConnectionEndpoints endpoints = connection.ServerSide();
  close(connection.server);
  connection.server = -1;
  EXPECT_FALSE(ClientConnection::Find(endpoints).has_value());
}

TEST(ClientConnectionTest, OpenWhileTheClientIsThereEvenWithBytesWaiting) {
  Loopback connection;
  auto found = ClientConnection::Find(connection.ServerSide());
  ASSERT_TRUE(found.has_value());
  EXPECT_FALSE(found->PeerClosed());
  ASSERT_EQ(write(connection.client, "GET", 3), 3);  // a pipelined next request
  EXPECT_FALSE(found->PeerClosed());
  char read_back[3];
  ASSERT_EQ(read(connection.server, read_back, 3), 3);  // the peek consumed nothing
  EXPECT_FALSE(found->PeerClosed());
}

TEST(ClientConnectionTest, ClosedOnceTheClientClosesOrResets) {
  Loopback closed;
  auto found = ClientConnection::Find(closed.ServerSide());
  ASSERT_TRUE(found.has_value());
  close(closed.client);
  closed.client = -1;
  AwaitHangUp(closed.server);
  EXPECT_TRUE(found->PeerClosed());

  Loopback reset;
  found = ClientConnection::Find(reset.ServerSide());
  ASSERT_TRUE(found.has_value());
  linger abort_on_close{1, 0};  // close sends a reset
  ASSERT_EQ(setsockopt(reset.client, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close)), 0);
  close(reset.client);
  reset.client = -1;
  AwaitHangUp(reset.server);
  EXPECT_TRUE(found->PeerClosed());
}

}  // namespace
}  // namespace dslaunch::runtime
