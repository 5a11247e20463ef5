#include "agent/rank_state.h"

#include "absl/strings/str_cat.h"

namespace dslaunch {

bool RankLifecycle::IsFinal() const {
  return state_ == RANK_EXITED || state_ == RANK_KILLED || state_ == RANK_LOST;
}

absl::Status RankLifecycle::Transition(RankState next) {
  bool allowed = false;
  switch (state_) {
    case RANK_SPAWNING:
      allowed = next == RANK_RUNNING || next == RANK_LOST;  // (1), (2)
      break;
    case RANK_RUNNING:
      allowed = next == RANK_EXITED || next == RANK_KILLED;  // (3), (4)
      break;
    default:
      allowed = false;  // final states
  }
  if (!allowed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank state ", RankState_Name(state_), " cannot become ", RankState_Name(next)));
  }
  state_ = next;
  return absl::OkStatus();
}

}  // namespace dslaunch
