// Note [Store keys of the rank contract]
// The keys that the controller and ranks share in the rendezvous store, each
// defined once. All live in the namespace of one job attempt.
//
//   control/preempt       controller -> ranks: save a checkpoint at the next step and stop (Note [Preemption])
//   progress/step         rank 0 -> controller: "step N", before heartbeats carry progress
//   checkpoint/committed  rank 0 -> controller: the tag of the last committed checkpoint (Note [Committed checkpoints])
//   data/ready            rank 0 -> ranks: "ok", or why the dataset could not be prepared
#pragma once

namespace dslaunch::store_keys {

inline constexpr char kPreempt[] = "control/preempt";
inline constexpr char kProgressStep[] = "progress/step";
inline constexpr char kCheckpointCommitted[] = "checkpoint/committed";
inline constexpr char kDataReady[] = "data/ready";

}  // namespace dslaunch::store_keys
