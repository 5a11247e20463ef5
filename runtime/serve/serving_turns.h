// Note [Tensor-parallel serving]: dsserve started by dslaunch with N ranks
// splits the model over the N (Note [Tensor-parallel generation]); every
// rank must then submit, cancel and step exactly as the others do. Rank 0
// serves HTTP and runs the serving loop (Note [The serving loop]); at each
// turn, before touching its engine, it broadcasts the turn's mail (the new
// requests with their keys, the cancelled keys) over the tensor group. The
// other ranks receive each turn and apply it to their own engine in the same
// order: submissions, cancellations, then one Step when the engine is not
// idle, and drop what finished. Every input that decides the engines' state
// crosses the wire; the engines' own decisions (admission, scheduling,
// sampling) are deterministic, so the ranks stay in step and each Step's
// collectives pair up. An idle rank 0 sends an empty turn every few seconds
// (the followers wait in a broadcast, which a backend may time out); Stop,
// or a failed step, sends a stop turn and the followers return.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"
#include "runtime/generate/generation_engine.h"

namespace dslaunch::runtime {

struct ServingTurn {
  bool stop = false;
  std::vector<std::pair<int64_t, GenerationRequest>> submitted;  // stream key, request
  std::vector<int64_t> cancelled;                                // stream keys
};

// The turn as int64 words and back (doubles bit for bit). DecodeTurn:
// DataLoss naming what is cut short or malformed.
std::vector<int64_t> EncodeTurn(const ServingTurn& turn);
absl::StatusOr<ServingTurn> DecodeTurn(const std::vector<int64_t>& words);

// Rank 0's side: broadcasts each turn over `group` (tensors on `device`,
// what the group's backend takes).
class TurnPublisher {
 public:
  TurnPublisher(Communicator* group, torch::Device device) : group_(group), device_(device) {}
  absl::Status Publish(const ServingTurn& turn);

 private:
  Communicator* group_;
  torch::Device device_;
};

// The other ranks' side: receives turns from rank 0 of `group` and applies
// each to `engine` until a stop turn (OK) or an error.
absl::Status FollowServingTurns(GenerationEngine& engine, Communicator& group, torch::Device device);

}  // namespace dslaunch::runtime
