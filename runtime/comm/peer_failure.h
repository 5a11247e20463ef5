// Note [A peer's failure is not the root cause]
// When the ranks agree on a failure (Engine::CountFailedRanks: a checkpoint
// part one rank could not write), the ranks that did not fail return an
// error too, but theirs only says that another rank failed. If they exited at
// once, the controller could take one of theirs, first to arrive, as the
// job's root cause ("… not saved: 1 other rank(s) failed") instead of the
// failing rank's ("write …/rank_1.pt: No space left on device (ENOSPC)").
// So such an error is marked, and dsrank, under a controller, prints it and
// waits (bounded) to be stopped with the rest of the job.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace dslaunch::runtime {

// kAborted, marked as a consequence of another rank's failure.
absl::Status PeerFailureError(const std::string& message);
bool IsPeerFailure(const absl::Status& status);

}  // namespace dslaunch::runtime
