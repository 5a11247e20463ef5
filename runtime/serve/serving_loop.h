// Note [The serving loop]: one thread owns the generation engine (which is
// not thread-safe) and runs it; HTTP threads talk to it through a mailbox.
//  - Submit (any thread) checks the request against the engine's fixed
//    limits (GenerationEngine::CheckRequest), refuses it when the server is
//    full (ResourceExhausted: --max_sequences running plus --max_queue
//    waiting) or stopped or broken (Unavailable), and otherwise posts it and
//    returns the request's stream at once.
//  - The loop thread sleeps until there is mail or work; each turn it hands
//    new requests to the engine, applies cancellations (a client went away,
//    a stop string was found), runs one Step, and delivers each new token to
//    its request's stream. A finished request's blocks are back in the pool
//    before the next step.
//  - A failed step (out of device memory, a kernel error) ends every request
//    with that error, and the server answers Unavailable from then on: it
//    never serves from an engine in an unknown state.
//  - Stop ends every request not yet finished (Unavailable, "shutting
//    down") and joins the thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/serve/serving_metrics.h"
#include "runtime/serve/serving_turns.h"

namespace dslaunch::runtime {

struct ServingLoopOptions {
  int64_t max_queue = 256;  // requests waiting beyond the engine's max_sequences
  // Tests: called on the loop thread at the start of each turn with work,
  // before it reads its mail (a test holds the loop between two steps).
  std::function<void()> on_turn;
  // Note [Tensor-parallel serving]: every turn's mail is broadcast to the
  // other ranks of the tensor group first (borrowed; null with one rank);
  // an idle loop sends an empty turn after `idle_turn`.
  TurnPublisher* publisher = nullptr;
  absl::Duration idle_turn = absl::Seconds(5);
};

// What arrived for a request since the consumer last looked.
struct StreamUpdate {
  std::vector<int64_t> tokens;
  FinishReason finished = FinishReason::kNone;  // set once, when it ended
  absl::Status error;                           // it ended because the engine failed or stopped
  bool ended() const { return finished != FinishReason::kNone || !error.ok(); }
};

class ServingLoop;

// One request's tokens as the loop produces them. Thread-safe.
class RequestStream {
 public:
  // Blocks until something new arrives or `deadline`; returns what is new
  // (empty on a timeout). After the end, returns the end again.
  StreamUpdate Wait(absl::Time deadline);
  // Asks the loop to end the request (kCancelled) and free its blocks.
  // Harmless after the end.
  void Cancel();

 private:
  friend class ServingLoop;
  struct Mailbox;
  RequestStream(int64_t key, std::shared_ptr<Mailbox> mailbox) : key_(key), mailbox_(std::move(mailbox)) {}
  void Deliver(int64_t token);
  void End(FinishReason reason, absl::Status error);

  const int64_t key_;
  std::shared_ptr<Mailbox> mailbox_;
  absl::Mutex mu_;
  std::vector<int64_t> tokens_ ABSL_GUARDED_BY(mu_);
  FinishReason finished_ ABSL_GUARDED_BY(mu_) = FinishReason::kNone;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

class ServingLoop {
 public:
  // `metrics` may be null; it must outlive the loop.
  ServingLoop(std::unique_ptr<GenerationEngine> engine, const ServingLoopOptions& options, ServingMetrics* metrics);
  ~ServingLoop();  // Stop()

  void Start();
  // Idempotent and thread-safe (a signal-handling thread may call it).
  void Stop();

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);

  // The engine's fixed figures (CheckRequest, context_length, ...): const
  // methods that read only what Create fixed.
  const GenerationEngine& engine() const { return *engine_; }
  // OK while serving; the step error that broke it, or Unavailable after Stop.
  absl::Status health() const;
  // The engine's figures after the loop's last turn.
  GenerationStats Stats() const;

 private:
  struct Active;
  void Run();

  std::unique_ptr<GenerationEngine> engine_;
  const ServingLoopOptions options_;
  ServingMetrics* const metrics_;
  std::shared_ptr<RequestStream::Mailbox> mailbox_;
  absl::Mutex stop_mu_;  // serializes Stop
  std::thread thread_;
};

}  // namespace dslaunch::runtime
