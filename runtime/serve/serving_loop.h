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
//  - A request of n choices (OpenAI's n, best_of) is n engine sequences
//    under one stream: each choice has its own stream key, is admitted,
//    cancelled and counted (--max_queue, the metrics) as a request of its
//    own, and ends on its own; the stream ends when every choice has.
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
#include <optional>
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

// What arrived for one choice of a request since the consumer last looked.
struct ChoiceUpdate {
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;                         // one per token
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // one per token, with sampling.top_logprobs
  std::optional<PromptLogprobs> prompt_logprobs;        // with its first token, with prompt_logprobs
  FinishReason finished = FinishReason::kNone;          // once it ended (repeated in later updates)
};

// What arrived for a request: one entry per choice, in the order submitted.
struct StreamUpdate {
  std::vector<ChoiceUpdate> choices;
  absl::Status error;  // every choice ended because the engine failed or the server stopped
  // An error, or every choice finished (an update with no choices, as a
  // default-constructed one, has not ended).
  bool ended() const {
    if (!error.ok()) return true;
    for (const ChoiceUpdate& choice : choices) {
      if (choice.finished == FinishReason::kNone) return false;
    }
    return !choices.empty();
  }
};

class ServingLoop;

// One request's tokens as the loop produces them: one or more choices (the
// engine runs each as its own sequence). Thread-safe.
class RequestStream {
 public:
  // Blocks until something new arrives (a token, a choice's end, an error)
  // or `deadline`; returns what is new, with each choice's end once it
  // ended (no tokens on a timeout). After the end, returns the end again.
  StreamUpdate Wait(absl::Time deadline);
  // Asks the loop to end every choice not yet ended (kCancelled) and free
  // their blocks. Harmless after the end.
  void Cancel();
  // The same for one choice (a stop string ended it).
  void CancelChoice(size_t choice);
  size_t choices() const { return keys_.size(); }

 private:
  friend class ServingLoop;
  struct Mailbox;
  struct Choice {
    ChoiceUpdate pending;  // tokens not yet taken; `finished` once it ended
    bool end_reported = false;
  };
  RequestStream(std::vector<int64_t> keys, std::shared_ptr<Mailbox> mailbox);
  void Deliver(size_t choice, GeneratedToken token);
  void End(size_t choice, FinishReason reason);
  void Fail(absl::Status error);  // ends every choice

  const std::vector<int64_t> keys_;  // one per choice
  std::shared_ptr<Mailbox> mailbox_;
  absl::Mutex mu_;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mu_);
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

  // One request, one choice.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);
  // One request of several choices (OpenAI's n), each its own sequence:
  // all queued or none. InvalidArgument naming "n" when there are more than
  // the server ever holds at once.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(std::vector<GenerationRequest> choices);

  // The engine's fixed figures (CheckRequest, context_length, ...): const
  // methods that read only what Create fixed.
  const GenerationEngine& engine() const { return *engine_; }
  // The choices it holds at once: --max_sequences running plus --max_queue.
  int64_t capacity() const { return engine_->max_sequences() + options_.max_queue; }
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
