// One change of the rendezvous store, as its write-ahead log records it
// (Note [Controller failover]): the controller's journal keeps every change
// in the order the store made it, and a controller that takes over replays
// them into its own store (RendezvousStore::Restore).
#pragma once

#include <string>

namespace dslaunch {

struct StoreChange {
  enum class Kind { kPut, kDelete, kDropAttempt, kAttemptToken };
  Kind kind = Kind::kPut;
  std::string key;    // the full key ("<attempt>/<key>") for kPut and kDelete
  std::string value;  // kPut's value; kAttemptToken's token
  int attempt = 0;    // kDropAttempt, kAttemptToken
};

}  // namespace dslaunch
