// Whether the client of a request that is still being answered is still
// there.
//
// Note [A non-streaming client that goes away]
//   A streaming response notices a client that went away at its next write
//   (Note [OpenAI-compatible serving]). A non-streaming one writes nothing
//   until the whole answer is ready, so without a look at the connection a
//   client that gave up (a timeout, Ctrl-C) would keep its sequence and its
//   cache blocks until max_tokens. While it waits, the handler looks at the
//   connection's socket once per update (and at least once a second): a
//   peek that reads end-of-file or a reset means the client closed its side,
//   and the request is cancelled as a streaming one is (the answer httplib
//   then tries to write is a 499, nginx's "client closed request", with
//   Connection: close). Bytes waiting to be read (a pipelined next request)
//   mean it is still there; a client that pipelines a request and then
//   closes is not seen before its earlier answers are written. A client that
//   half-closes after sending (shutdown(SHUT_WR)) counts as gone, as in
//   uvicorn (vLLM's server); HTTP clients such as curl, requests and the
//   OpenAI SDK do not do that.
//
//   cpp-httplib 0.11 (Debian 12's) hands a handler neither its socket nor a
//   "connection closed" check (later versions added one), only the four
//   addresses of its connection, so Find looks the socket up among this
//   process's descriptors by those addresses, written as httplib writes
//   them (getnameinfo, numeric), first thing in the handler. The lookup is
//   sound while the handler runs: httplib closes the socket only after the
//   handler returns, and only one open socket has a given pair of
//   endpoints. A client that reset the connection before the lookup is not
//   found (getpeername fails): its request runs to its end, and dsserve
//   warns once.
#pragma once

#include <optional>
#include <string>

namespace dslaunch::runtime {

struct ConnectionEndpoints {
  std::string local_address;  // numeric, as getnameinfo writes it ("127.0.0.1", "::1")
  int local_port = -1;
  std::string remote_address;
  int remote_port = -1;
};

class ClientConnection {
 public:
  // The open TCP socket of this process with these endpoints; none when no
  // socket has them (the client already went away and httplib closed it).
  static std::optional<ClientConnection> Find(const ConnectionEndpoints& endpoints);

  // True once the client closed its side or reset the connection; false
  // while it is open, with or without bytes waiting to be read. Never
  // blocks, never consumes a byte.
  bool PeerClosed() const;

  int descriptor() const { return fd_; }

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;  // not owned: httplib closes it
};

}  // namespace dslaunch::runtime
