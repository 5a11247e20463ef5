// Note [Continuous batching]: the generation engine serves many requests
// with one model and one paged key/value cache (Note [Paged key/value
// cache]). Each Step() is one cached forward over the tokens the scheduler
// picks:
//   1. waiting requests are admitted, oldest first, while fewer than
//      max_sequences run and the cache can hold a request's tokens so far
//      plus one, with a block to spare for each sequence running (Note
//      [Growing reservations]);
//   2. every running sequence that has its prompt in the cache decodes one
//      token (its block for it taken first, a later sequence preempted when
//      none is left);
//   3. what is left of max_tokens_per_step goes to prompts not yet in the
//      cache, oldest first, a long prompt split across steps (DeepSpeed-FastGen's
//      Dynamic SplitFuse): decoding never stalls behind a long prefill.
// New requests join between steps; a finished or cancelled request's blocks
// go back to the pool at once. Each request draws its samples from its own
// generator seeded by its seed, so its tokens do not depend on what else is
// in the batch: batched output equals one-request-at-a-time output (to
// rounding where a preempted sequence's keys are computed again).
//
// Note [Growing reservations]
// A sequence holds blocks for the positions it has and the next one, not for
// its whole max_new_tokens: a chat request that leaves max_tokens out may run
// to the end of the context, and reserving that up front would let one such
// request hold the whole cache while a 16-token one waits behind it (vLLM
// reserves as it goes too). Before each step every running sequence, oldest
// first, gets the block its newest token needs; when the pool has none left,
// the sequence admitted last is preempted: its blocks go back and it waits at
// the head of the queue with its tokens, computed again from them (prompt and
// output as one prompt piece, split across steps like any) when it comes
// back. Its output goes on from where it stopped: the tokens already streamed
// stay, its generator and output constraint keep their state, its prompt is
// not scored again. A request alone always fits (Submit refuses prompt +
// max_new_tokens past the whole cache), so the oldest sequence always runs.
// A request's prompt plus max_new_tokens must fit the model's context
// (max_position_embeddings), except with dynamic NTK scaling, made to run
// past it: there a new token's rotation uses the length so far while cached
// keys keep theirs, as Hugging Face's cached generate() does.
//
// Note [Tensor-parallel generation]: with the model split over a tensor group
// (Note [Tensor parallelism]), every rank of the group runs the same engine
// on the same requests: its cache holds its own key/value heads, the cached
// forward's row-parallel projections sum over the group, and the head's
// vocabulary slices are gathered so that every rank has the whole logits.
// Each rank then samples the same token from the same logits with the same
// seeded generator, so the ranks stay in step without sending tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/generate/decode_graphs.h"
#include "runtime/generate/paged_kv_cache.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/generate/sampling.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct GenerationEngineOptions {
  int64_t max_sequences = 64;          // running at once
  int64_t max_tokens_per_step = 512;   // tokens of one forward (>= max_sequences)
  int64_t block_size = 16;             // cache positions per block
  int64_t cache_positions = 1 << 16;   // the pool, in positions (rounded up to blocks)
  // Attention's key length padded to a multiple of this (Note [Paged
  // key/value cache]): a new shape every step costs more than the padding.
  int64_t key_length_multiple = 128;
  // Decode steps as CUDA graph replays (Note [Decode graphs]), at most this
  // many graphs held.
  bool cuda_graphs = false;
  int64_t max_cuda_graphs = 128;
  // The tokenizer's tokens as bytes (TokenBytesOf): needed by requests with
  // an output constraint (Note [Constrained output]); null: refused.
  std::shared_ptr<const TokenVocabulary> vocabulary;
};

struct GenerationRequest {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  std::vector<int64_t> stop_tokens;  // ends the request when generated (kept in its output)
  // Also score the prompt (Note [Prompt log-probabilities]).
  bool prompt_logprobs = false;
  // The form the output must take (Note [Constrained output]); a request
  // with one is sampled on the host.
  OutputConstraint constraint;
};

// Note [Prompt log-probabilities]
// A request with prompt_logprobs has each prompt token after the first
// scored: the log-probability the model gives it after the tokens before it
// (and sampling.top_logprobs alternatives), what lm-eval-harness's
// loglikelihood requests read through dsserve (echo with logprobs). Every
// step that runs a piece of such a prompt keeps the logits of each of the
// piece's positions, not only the last (position p scores token p + 1), so
// a prompt split over steps is scored whole; the scores come with the
// request's first generated token and in its result. The scored rows go to
// the host as the sampled ones do: a prompt of P tokens moves P rows of the
// vocabulary once.

// Prompt tokens 1..P-1 scored (the first has nothing before it).
struct PromptLogprobs {
  std::vector<double> logprobs;
  std::vector<std::vector<TokenLogprob>> top;  // with sampling.top_logprobs
};

enum class FinishReason { kNone, kStop, kLength, kCancelled };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "cancelled"

// What a request got in one step.
struct GeneratedToken {
  int64_t request = 0;
  int64_t token = 0;  // -1: the request ended with no token (nothing its output constraint allows)
  double logprob = 0;
  FinishReason finished = FinishReason::kNone;  // set on its last token
  std::vector<TokenLogprob> top_logprobs;       // with sampling.top_logprobs
  // On a request's first token, with prompt_logprobs.
  std::optional<PromptLogprobs> prompt_logprobs;
};

struct GenerationResult {
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, with sampling.top_logprobs
  PromptLogprobs prompt_logprobs;                       // with prompt_logprobs
  FinishReason finished = FinishReason::kNone;
};

struct GenerationStats {
  int64_t waiting = 0, running = 0;
  int64_t cache_blocks = 0, cache_free_blocks = 0, cache_bytes = 0;
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  int64_t last_step_tokens = 0;  // tokens the last forward ran
  int64_t graphed_steps = 0;     // decode steps replayed from a recorded graph
  int64_t preemptions = 0;       // sequences sent back to wait (Note [Growing reservations])
  int64_t graphs_recorded = 0, graphs_held = 0;
  // Wall time of the steps: the forward (planning, launch, the device's work
  // and what comes back: Note [Choosing on the device]; a step of prompt
  // pieces that samples nothing does not wait for the device, so its device
  // time lands in the next step's) and choosing the tokens on the host
  // (sampling and bookkeeping, while the device waits).
  double forward_seconds = 0, choosing_seconds = 0;
};

class GenerationEngine {
 public:
  // `model` in eval mode on its device, with the parameters' dtype the
  // cache's. With tensor parallelism, every rank of the group creates one
  // and submits the same requests (Note [Tensor-parallel generation]).
  // options.cuda_graphs needs the model on a CUDA device of a LibTorch
  // build with CUDA, and no tensor parallelism, experts or dynamic NTK
  // scaling (Note [Decode graphs]); refused naming which.
  static absl::StatusOr<std::unique_ptr<GenerationEngine>> Create(Llama model, const GenerationEngineOptions& options);
  // With `decode_recorder` recording the decode steps whatever
  // options.cuda_graphs says (tests: RerunRecorder on the CPU).
  static absl::StatusOr<std::unique_ptr<GenerationEngine>> Create(Llama model, const GenerationEngineOptions& options,
                                                                  std::unique_ptr<StepRecorder> decode_recorder);

  // Queues a request; returns its id. InvalidArgument naming the field for
  // an empty prompt, a token id outside the vocabulary, bad sampling
  // options, or a prompt plus max_new_tokens longer than the model's
  // context or the whole cache.
  absl::StatusOr<int64_t> Submit(GenerationRequest request);
  // What Submit checks, without queueing: thread-safe (it reads only what
  // Create fixed), so a server can refuse a bad request on its own thread.
  absl::Status CheckRequest(const GenerationRequest& request) const;
  // The model's context (max_position_embeddings), and whether a request may
  // run past it (dynamic NTK scaling).
  int64_t context_length() const { return model_->options().rope.max_position_embeddings; }
  int64_t max_sequences() const { return options_.max_sequences; }
  // Positions the whole key/value cache holds.
  int64_t cache_positions() const { return cache_->total_blocks() * cache_->block_size(); }
  bool runs_past_context() const { return model_->options().rope.scaling.type == RopeScaling::Type::kDynamic; }
  // Ends a request now (a client went away); its blocks go back to the pool.
  // NotFound for an unknown or finished id.
  absl::Status Cancel(int64_t request);

  // One forward over the scheduled tokens; the tokens it produced.
  absl::StatusOr<std::vector<GeneratedToken>> Step();
  bool Idle() const { return waiting_.empty() && running_.empty(); }
  GenerationStats Stats() const;

  // Submits `requests` and steps until all are done; results in their order.
  // A request refused by Submit leaves nothing queued (the ones before it
  // are cancelled).
  absl::StatusOr<std::vector<GenerationResult>> GenerateAll(std::vector<GenerationRequest> requests);
  // The result of a finished request (taken once); NotFound otherwise.
  absl::StatusOr<GenerationResult> TakeResult(int64_t request);

 private:
  struct Sequence {
    int64_t id = 0;
    GenerationRequest request;
    std::vector<int64_t> tokens;  // prompt, then generated
    int64_t cached = 0;           // positions whose keys and values are in the cache
    int64_t prompt_counted = 0;   // prompt positions in stats_.prompt_tokens
    at::Generator generator;
    GenerationResult result;
    std::shared_ptr<OutputConstraintState> constraint;  // with request.constraint
  };
  GenerationEngine(Llama model, const GenerationEngineOptions& options, std::unique_ptr<PagedKvCache> cache,
                   torch::Device device);
  void Admit();
  // Note [Growing reservations]: every running sequence's block for its
  // newest token, preempting the latest admitted while the pool has none.
  void GrowReservations();
  // Sends running_[index] back to the head of the queue, its blocks freed.
  void Preempt(size_t index);
  // The step's logits [rows, vocabulary] on the model's device, without a recorded graph.
  absl::StatusOr<torch::Tensor> Forward(const std::vector<StepPiece>& pieces, const std::vector<int64_t>& tokens,
                                        const std::vector<int64_t>& positions, const std::vector<int64_t>& logit_rows);
  void Finish(Sequence& sequence, FinishReason reason);

  Llama model_;
  GenerationEngineOptions options_;
  std::unique_ptr<PagedKvCache> cache_;
  std::unique_ptr<DecodeGraphs> graphs_;  // with cuda_graphs (after cache_: it uses it)
  torch::Device device_;  // the model's, fixed at Create
  int64_t next_id_ = 1;
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;  // admission order
  std::map<int64_t, GenerationResult> finished_;
  GenerationStats stats_;
};

}  // namespace dslaunch::runtime
