// The rank state machine, owned by the agent. The enum lives in
// proto/agent.proto; RankLifecycle::Transition is the one function that
// changes it.
//
//              (1) started              (3) exited by itself
//   SPAWNING ───────────────▶ RUNNING ─────────────────────▶ EXITED(code)
//      │                         │      (4) ended by a signal
//      │ (2) could not start     └─────────────────────────▶ KILLED(signal)
//      ▼
//     LOST
//
// EXITED, KILLED and LOST are final. Whether the agent asked for the end
// (StopJob, lease) is recorded beside the state, not as a state of its own.
#pragma once

#include "absl/status/status.h"
#include "proto/agent.pb.h"

namespace dslaunch {

// Not thread-safe; owned by one RankSupervisor.
class RankLifecycle {
 public:
  RankState state() const { return state_; }
  bool IsFinal() const;

  // Moves to `next` along one of the numbered edges; anything else is a
  // FailedPrecondition error naming both states, and the state is unchanged.
  absl::Status Transition(RankState next);

 private:
  RankState state_ = RANK_SPAWNING;
};

}  // namespace dslaunch
