// Abseil's mutex deadlock detection, which gRPC's mutexes run through: off
// in the control plane's daemons.
//
// Debian builds Abseil without NDEBUG, so every absl::Mutex acquisition
// records lock-order edges in a global graph (GraphCycles). That is a debug
// aid that costs the controller dearly at scale: with 500 agents x 8 ranks,
// GraphCycles::GetId and InsertEdge were 10-15% of dslaunch's CPU time
// (perf, scripts/control-plane-scale.sh). Our own locks are std::mutex and
// are not affected; TSan/ASan builds still find our races.
#pragma once

#include "absl/synchronization/mutex.h"

namespace dslaunch {

inline void TurnOffMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace dslaunch
