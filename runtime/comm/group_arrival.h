// Note [Connected before anyone leaves]
// Gloo's rendezvous returns on a member once its own sockets are connected,
// which for the connecting side of a pair is when the kernel has completed
// the handshake: the listening side may not have accepted yet. A member that
// then drops the group at once (a rank whose work needs no collective, a
// rank failing right after start) closes a socket the other side is still
// accepting; Debian's Gloo reads the end of the stream on it before its
// waiting thread wakes, and that member's rendezvous throws "Connection
// closed by peer" although every member had connected (a CI run saw it
// once; comm_tests' Communicator.AMemberLeavingRightAfterTheRendezvous-
// FailsNoOther failed in most runs beside two busy loops before this). So no
// member returns from creating a group before every member's rendezvous has
// returned: each records in the store how its rendezvous went, then waits
// for every member's record, in one call. The store is a channel of its own,
// so no member's leaving can fail this wait; a member whose rendezvous
// failed records that, so the others fail at once naming it rather than
// wait out the timeout. The records stay (a group's name is used once per
// attempt, and the store forgets an attempt's keys with it).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "common/store_client.h"

namespace dslaunch::runtime {

// Records member `rank`'s rendezvous under `prefix` (the group's store
// prefix): OK, or the error it ended with.
absl::Status RecordGroupArrival(StoreClient& store, const std::string& prefix, int rank, const absl::Status& how);

// Waits until all `size` members have recorded theirs: OK when every one
// connected; else UNAVAILABLE naming the first member that failed and its
// error, or the store's error (DEADLINE_EXCEEDED after `timeout`).
absl::Status AwaitGroupArrivals(StoreClient& store, const std::string& prefix, int size,
                                std::chrono::milliseconds timeout);

}  // namespace dslaunch::runtime
