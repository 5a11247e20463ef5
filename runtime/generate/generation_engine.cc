#include "runtime/generate/generation_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/generate/greedy_choice.h"
#include "runtime/model/decode_linear.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kNone:
      break;
  }
  return "";
}

GenerationEngine::GenerationEngine(Llama model, const GenerationEngineOptions& options,
                                   std::unique_ptr<PagedKvCache> cache, torch::Device device)
    : model_(std::move(model)), options_(options), cache_(std::move(cache)), device_(device) {}

absl::StatusOr<std::unique_ptr<GenerationEngine>> GenerationEngine::Create(Llama model,
                                                                           const GenerationEngineOptions& options) {
  std::unique_ptr<StepRecorder> recorder;
  if (options.cuda_graphs) {
    const torch::Device device = model->parameters().front().device();
    if (!compat::kHasCudaGraphs) {
      return absl::FailedPreconditionError("cuda_graphs: this build's LibTorch has no CUDA");
    }
    if (!device.is_cuda()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda_graphs needs the model on a CUDA device (it is on ", device.str(), ")"));
    }
    recorder = CudaGraphRecorder(device);
  }
  return Create(std::move(model), options, std::move(recorder));
}

absl::StatusOr<std::unique_ptr<GenerationEngine>> GenerationEngine::Create(
    Llama model, const GenerationEngineOptions& options, std::unique_ptr<StepRecorder> decode_recorder) {
  const LlamaOptions& llama = model->options();
  const TensorParallelGroup& tp = llama.tensor_parallel;
  if (tp.split() && tp.sequence_parallel) {
    return absl::UnimplementedError("generation with sequence parallelism is not built (use tensor parallelism alone)");
  }
  if (llama.kv_heads % tp.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism over ", tp.size, " ranks needs the ",
                                                   llama.kv_heads, " key/value heads to divide among them"));
  }
  if (options.max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequences must be >= 1 (got ", options.max_sequences, ")"));
  }
  if (options.max_tokens_per_step < options.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens_per_step (", options.max_tokens_per_step,
                                                   ") must be >= max_sequences (", options.max_sequences,
                                                   "): every running sequence decodes a token each step"));
  }
  if (options.block_size < 1 || options.cache_positions < 1) {
    return absl::InvalidArgumentError(absl::StrCat("block_size and cache_positions must be >= 1 (got ",
                                                   options.block_size, ", ", options.cache_positions, ")"));
  }
  const torch::Tensor any = model->parameters().front();
  PagedKvCacheOptions cache;
  cache.layers = llama.layers;
  cache.kv_heads = llama.kv_heads / tp.size;  // this rank's (Note [Tensor-parallel generation])
  cache.head_dim = llama.head_dim;
  cache.block_size = options.block_size;
  cache.key_length_multiple = options.key_length_multiple;
  cache.blocks = (options.cache_positions + options.block_size - 1) / options.block_size;
  cache.dtype = any.scalar_type();
  cache.device = any.device();
  cache.fused_decode_attention = llama.fused_kernels;  // decodes through the CUDA kernel too
  if (decode_recorder != nullptr) {
    // Note [Decode graphs]: what a recorded step cannot hold.
    if (tp.split()) return absl::UnimplementedError("cuda_graphs with tensor parallelism is not built");
    if (model->layer_residency() != nullptr) {
      return absl::UnimplementedError(
          "cuda_graphs with streamed layer weights (--offload_params) is not built: the host issues each layer's copy");
    }
    if (llama.moe.enabled()) {
      return absl::UnimplementedError("cuda_graphs with mixture-of-experts layers is not built (routing reads sizes on the host)");
    }
    if (llama.rope.scaling.type == RopeScaling::Type::kDynamic) {
      return absl::UnimplementedError(
          "cuda_graphs with dynamic NTK scaling (rope_scaling type 'dynamic') is not built: the rotary table changes "
          "past the context");
    }
    if (options.max_cuda_graphs < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_cuda_graphs must be >= 1 (got ", options.max_cuda_graphs, ")"));
    }
  }
  auto pool = PagedKvCache::Create(cache);
  if (!pool.ok()) return pool.status();
  model->eval();
  model->JoinProjections();  // Note [Joined projections]
  auto engine = std::unique_ptr<GenerationEngine>(
      new GenerationEngine(std::move(model), options, std::move(*pool), cache.device));
  if (decode_recorder != nullptr) {
    engine->graphs_ = std::make_unique<DecodeGraphs>(engine->model_, *engine->cache_, std::move(decode_recorder),
                                                     options.max_cuda_graphs);
  }
  return engine;
}

absl::StatusOr<int64_t> GenerationEngine::Submit(GenerationRequest request) {
  if (absl::Status checked = CheckRequest(request); !checked.ok()) return checked;
  Sequence sequence;
  sequence.id = next_id_++;
  sequence.tokens = request.prompt;
  sequence.generator = at::make_generator<at::CPUGeneratorImpl>(request.sampling.seed);
  if (request.constraint.kind != OutputConstraint::Kind::kNone) {
    auto constraint = StartOutputConstraint(request.constraint, options_.vocabulary, "output constraint");
    if (!constraint.ok()) return constraint.status();
    sequence.constraint = std::move(*constraint);
  }
  sequence.request = std::move(request);
  waiting_.push_back(std::move(sequence));
  return waiting_.back().id;
}

absl::Status GenerationEngine::CheckRequest(const GenerationRequest& request) const {
  const LlamaOptions& llama = model_->options();
  if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: no tokens");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= llama.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: token ", i, " (", request.prompt[i],
                                                     ") is not below the vocabulary size ", llama.vocab_size));
    }
  }
  if (request.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 1 (got ", request.max_new_tokens, ")"));
  }
  if (absl::Status checked = CheckSamplingOptions(request.sampling, ""); !checked.ok()) return checked;
  const int64_t positions = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  // Dynamic NTK scaling is made to run past the trained context; any
  // other model is held to it, as vLLM's max_model_len.
  const int64_t context = llama.rope.max_position_embeddings;
  if (positions > context && llama.rope.scaling.type != RopeScaling::Type::kDynamic) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", request.prompt.size(), " tokens) + max_new_tokens (",
                                                   request.max_new_tokens, ") is longer than the model's context (",
                                                   context, ", max_position_embeddings)"));
  }
  if (llama.sliding_window > 0 && positions > llama.sliding_window) {
    return absl::InvalidArgumentError(absl::StrCat("prompt + max_new_tokens (", positions,
                                                   ") is longer than the model's sliding_window (",
                                                   llama.sliding_window, "): sliding-window attention is not built"));
  }
  if (cache_->BlocksFor(positions) > cache_->total_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt + max_new_tokens (", positions,
                                                   " positions) is more than the whole key/value cache holds (",
                                                   cache_->total_blocks() * cache_->block_size(), ")"));
  }
  if (request.constraint.kind != OutputConstraint::Kind::kNone) {
    if (options_.vocabulary != nullptr && options_.vocabulary->size() > llama.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("output constraint: the tokenizer has ",
                                                     options_.vocabulary->size(), " tokens, the model ",
                                                     llama.vocab_size));
    }
    auto constraint = StartOutputConstraint(request.constraint, options_.vocabulary, "output constraint");
    if (!constraint.ok()) return constraint.status();
  }
  return absl::OkStatus();
}

absl::Status GenerationEngine::Cancel(int64_t request) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id != request) continue;
    it->result.finished = FinishReason::kCancelled;
    finished_[request] = std::move(it->result);
    waiting_.erase(it);
    return absl::OkStatus();
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->id != request) continue;
    Finish(*it, FinishReason::kCancelled);
    running_.erase(it);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("request ", request, " is not waiting or running"));
}

void GenerationEngine::Finish(Sequence& sequence, FinishReason reason) {
  cache_->Release(sequence.id);
  sequence.result.finished = reason;
  finished_[sequence.id] = std::move(sequence.result);
}

void GenerationEngine::Admit() {
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_sequences) {
    Sequence& next = waiting_.front();
    // Note [Growing reservations]: its tokens (a preempted sequence's
    // output too) and the first one it samples; a block left over for each
    // sequence already running, so that admitting it preempts none of them.
    const int64_t positions = static_cast<int64_t>(next.tokens.size()) + 1;
    const int64_t spare = static_cast<int64_t>(running_.size());
    if (cache_->BlocksFor(positions) + spare > cache_->free_blocks()) break;
    if (!cache_->Reserve(next.id, positions).ok()) break;
    running_.push_back(std::move(next));
    waiting_.pop_front();
  }
}

void GenerationEngine::GrowReservations() {
  for (size_t i = 0; i < running_.size(); ++i) {
    const int64_t id = running_[i].id;
    const int64_t needed = static_cast<int64_t>(running_[i].tokens.size());
    while (cache_->Capacity(id) < needed && !cache_->Reserve(id, needed).ok()) {
      // The latest admitted goes, maybe this one; the oldest always fits.
      const bool itself = i + 1 == running_.size();
      Preempt(running_.size() - 1);
      if (itself) return;
    }
  }
}

void GenerationEngine::Preempt(size_t index) {
  Sequence sequence = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  cache_->Release(sequence.id);
  sequence.cached = 0;
  ++stats_.preemptions;
  waiting_.push_front(std::move(sequence));
}

absl::StatusOr<std::vector<GeneratedToken>> GenerationEngine::Step() {
  Admit();
  GrowReservations();
  std::vector<GeneratedToken> produced;
  if (running_.empty()) return produced;
  // What each running sequence runs this step: decodes first, then prompt
  // pieces in admission order within what is left of the budget.
  std::vector<StepPiece> pieces;
  std::vector<size_t> owners;  // index into running_ of each piece
  int64_t budget = options_.max_tokens_per_step;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& s = running_[i];
    if (s.cached == static_cast<int64_t>(s.tokens.size()) - 1) {
      pieces.push_back({s.id, s.cached, 1});
      owners.push_back(i);
      --budget;
    }
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const Sequence& s = running_[i];
    const int64_t missing = static_cast<int64_t>(s.tokens.size()) - s.cached;
    if (missing <= 1) continue;  // decoding (above; a one-token prompt too)
    const int64_t take = std::min(missing, budget);
    pieces.push_back({s.id, s.cached, take});
    owners.push_back(i);
    budget -= take;
  }
  std::vector<int64_t> tokens, positions, logit_rows;
  std::vector<size_t> sampled;          // owners of the sampled logit rows
  std::vector<int64_t> sampled_rows;    // their rows of the step's logits
  std::vector<std::pair<size_t, int64_t>> scored;  // prompt_logprobs: (owner, position) of each other row
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Sequence& s = running_[owners[p]];
    const int64_t prompt = static_cast<int64_t>(s.request.prompt.size());
    for (int64_t q = 0; q < pieces[p].count; ++q) {
      const int64_t position = pieces[p].first + q;
      tokens.push_back(s.tokens[position]);
      positions.push_back(position);
      // A position's logits score the prompt token after it.
      // (Not again when a preempted sequence is computed again.)
      if (s.request.prompt_logprobs && position + 1 < prompt &&
          position >= static_cast<int64_t>(s.result.prompt_logprobs.logprobs.size())) {
        scored.emplace_back(owners[p], position);
        logit_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
      }
    }
    // The piece reaches the sequence's newest token: its logits choose the next.
    if (pieces[p].first + pieces[p].count == static_cast<int64_t>(s.tokens.size())) {
      sampled_rows.push_back(static_cast<int64_t>(logit_rows.size()));
      logit_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
      sampled.push_back(owners[p]);
    }
  }
  // Note [Choosing on the device]: a greedy request with no repetition
  // penalty and no top_logprobs needs only the argmax of its row and that
  // token's log-probability, computed where the logits are (in fp64, the
  // log-softmax as SampleToken takes it on the host: the same values on the
  // CPU, equal to rounding on a GPU); two numbers a row come back instead of
  // a vocabulary's logits, and the host does not walk them: one kernel on a
  // GPU (greedy_choice.h). A sequence's rows always take the same path,
  // whatever shares its step.
  std::vector<int64_t> on_device(sampled.size(), -1);  // row of `chosen` for each sampled row, or -1
  std::vector<int64_t> device_rows;
  bool host_rows = !scored.empty();
  for (size_t r = 0; r < sampled.size(); ++r) {
    const SamplingOptions& sampling = running_[sampled[r]].request.sampling;
    if (sampling.greedy && sampling.repetition_penalty == 1.0 && sampling.top_logprobs == 0 &&
        running_[sampled[r]].constraint == nullptr) {
      on_device[r] = static_cast<int64_t>(device_rows.size());
      device_rows.push_back(sampled_rows[r]);
    } else {
      host_rows = true;
    }
  }
  // A decode step (one token of each piece) replays a recorded graph.
  const bool graphed = graphs_ != nullptr && tokens.size() == pieces.size();
  const auto forward_start = std::chrono::steady_clock::now();
  torch::Tensor chosen;       // [2, device rows] fp64 on the host: token ids, log-probabilities
  torch::Tensor host_logits;  // [logit rows, vocabulary] on the host, when a row is walked there
  absl::Status forward;
  try {
    // Nothing writes a weight while the engine runs, unless layers stream into slots.
    std::optional<ConstantWeightsScope> constant_weights;
    if (model_->layer_residency() == nullptr) constant_weights.emplace();
    absl::StatusOr<torch::Tensor> logits =
        graphed ? graphs_->Run(pieces, tokens) : Forward(pieces, tokens, positions, logit_rows);
    if (!logits.ok()) {
      forward = logits.status();
    } else {
      if (!device_rows.empty()) {
        bool every_row = static_cast<int64_t>(device_rows.size()) == logits->size(0);
        for (size_t i = 0; every_row && i < device_rows.size(); ++i) every_row = device_rows[i] == static_cast<int64_t>(i);
        chosen = ChooseGreedily(*logits, every_row ? torch::Tensor() : torch::tensor(device_rows, torch::kLong))
                     .to(torch::kCPU);
      }
      if (host_rows) host_logits = logits->to(torch::kCPU);
    }
  } catch (const c10::Error& e) {
    forward = absl::InternalError(e.what_without_backtrace());
  }
  // Nothing of a failed step is kept: a later Step runs it again.
  if (!forward.ok()) return absl::Status(forward.code(), absl::StrCat("generation step: ", forward.message()));
  if (graphed) ++stats_.graphed_steps;
  ++stats_.steps;
  stats_.last_step_tokens = static_cast<int64_t>(tokens.size());
  for (size_t p = 0; p < pieces.size(); ++p) {
    Sequence& s = running_[owners[p]];
    s.cached += pieces[p].count;
    // Prompt tokens once each (not again when a preempted one is computed again).
    const int64_t prompt_end = std::min<int64_t>(pieces[p].first + pieces[p].count, s.request.prompt.size());
    if (prompt_end > s.prompt_counted) {
      stats_.prompt_tokens += prompt_end - std::max(pieces[p].first, s.prompt_counted);
      s.prompt_counted = prompt_end;
    }
  }
  const auto choosing_start = std::chrono::steady_clock::now();
  stats_.forward_seconds += std::chrono::duration<double>(choosing_start - forward_start).count();
  // The scored rows are the ones not sampled, in order.
  for (size_t r = 0, next_scored = 0, next_sampled = 0; r < logit_rows.size(); ++r) {
    if (next_sampled < sampled_rows.size() && sampled_rows[next_sampled] == static_cast<int64_t>(r)) {
      ++next_sampled;
      continue;
    }
    const auto [owner, position] = scored[next_scored++];
    Sequence& s = running_[owner];
    SampledToken prompt_token = ScoreToken(host_logits[static_cast<int64_t>(r)], s.request.prompt[position + 1],
                                           s.request.sampling.top_logprobs);
    s.result.prompt_logprobs.logprobs.push_back(prompt_token.logprob);
    if (s.request.sampling.top_logprobs > 0) s.result.prompt_logprobs.top.push_back(std::move(prompt_token.top));
  }
  std::vector<bool> done(running_.size(), false);
  for (size_t r = 0; r < sampled.size(); ++r) {
    Sequence& s = running_[sampled[r]];
    SampledToken next;
    if (on_device[r] >= 0) {
      next.id = static_cast<int64_t>(chosen.accessor<double, 2>()[0][on_device[r]]);
      next.logprob = chosen.accessor<double, 2>()[1][on_device[r]];
    } else if (s.constraint != nullptr) {
      // Note [Constrained output]: only the tokens the form allows.
      torch::Tensor row = host_logits[sampled_rows[r]].clone();
      if (!s.constraint->Mask(row, s.request.stop_tokens)) {
        // No token continues the form: the request ends here.
        GeneratedToken out{s.id, -1, 0.0, FinishReason::kStop, {}, std::nullopt};
        Finish(s, out.finished);
        done[sampled[r]] = true;
        produced.push_back(out);
        continue;
      }
      next = SampleToken(row, s.request.sampling, s.generator, s.tokens);
      s.constraint->Accept(next.id);
    } else {
      next = SampleToken(host_logits[sampled_rows[r]], s.request.sampling, s.generator, s.tokens);
    }
    s.tokens.push_back(next.id);
    s.result.tokens.push_back(next.id);
    s.result.logprobs.push_back(next.logprob);
    if (s.request.sampling.top_logprobs > 0) s.result.top_logprobs.push_back(next.top);
    ++stats_.generated_tokens;
    GeneratedToken out{s.id, next.id, next.logprob, FinishReason::kNone, std::move(next.top), std::nullopt};
    if (s.request.prompt_logprobs && s.result.tokens.size() == 1) out.prompt_logprobs = s.result.prompt_logprobs;
    const auto& stops = s.request.stop_tokens;
    if (std::find(stops.begin(), stops.end(), next.id) != stops.end() ||
        (s.constraint != nullptr && s.constraint->Finished())) {
      out.finished = FinishReason::kStop;
    } else if (static_cast<int64_t>(s.result.tokens.size()) >= s.request.max_new_tokens) {
      out.finished = FinishReason::kLength;
    }
    if (out.finished != FinishReason::kNone) {
      Finish(s, out.finished);
      done[sampled[r]] = true;
    }
    produced.push_back(out);
  }
  std::vector<Sequence> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!done[i]) still.push_back(std::move(running_[i]));
  }
  running_ = std::move(still);
  stats_.choosing_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - choosing_start).count();
  return produced;
}

absl::StatusOr<torch::Tensor> GenerationEngine::Forward(const std::vector<StepPiece>& pieces,
                                                        const std::vector<int64_t>& tokens,
                                                        const std::vector<int64_t>& positions,
                                                        const std::vector<int64_t>& logit_rows) {
  auto step = cache_->BeginStep(pieces);
  if (!step.ok()) return step.status();
  torch::Tensor logits = model_->ForwardWithCache(torch::tensor(tokens, torch::kLong).view({1, -1}).to(device_),
                                                  torch::tensor(positions, torch::kLong), **step,
                                                  torch::tensor(logit_rows, torch::kLong));
  const TensorParallelGroup& tp = model_->options().tensor_parallel;
  if (tp.split()) {
    // Note [Tensor-parallel generation]: each rank holds a contiguous
    // range of the (padded) vocabulary; every rank gathers all of them.
    const torch::Tensor local = logits.t().contiguous();  // [vocabulary / T, rows]
    torch::Tensor all = torch::empty({local.size(0) * tp.size, local.size(1)}, local.options());
    if (absl::Status gathered = tp.comm->AllGather(local, all); !gathered.ok()) {
      return absl::Status(gathered.code(), absl::StrCat("gathering the logits: ", gathered.message()));
    }
    logits = all.narrow(0, 0, model_->options().vocab_size).t();
  }
  return logits;
}

GenerationStats GenerationEngine::Stats() const {
  GenerationStats stats = stats_;
  stats.waiting = static_cast<int64_t>(waiting_.size());
  stats.running = static_cast<int64_t>(running_.size());
  stats.cache_blocks = cache_->total_blocks();
  stats.cache_free_blocks = cache_->free_blocks();
  stats.cache_bytes = cache_->bytes();
  if (graphs_ != nullptr) {
    stats.graphs_recorded = graphs_->recorded();
    stats.graphs_held = graphs_->held();
  }
  return stats;
}

absl::StatusOr<GenerationResult> GenerationEngine::TakeResult(int64_t request) {
  auto it = finished_.find(request);
  if (it == finished_.end()) return absl::NotFoundError(absl::StrCat("request ", request, " has not finished"));
  GenerationResult result = std::move(it->second);
  finished_.erase(it);
  return result;
}

absl::StatusOr<std::vector<GenerationResult>> GenerationEngine::GenerateAll(std::vector<GenerationRequest> requests) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = Submit(std::move(requests[i]));
    if (!id.ok()) {
      for (int64_t queued : ids) {
        (void)Cancel(queued);
        (void)TakeResult(queued);
      }
      return absl::Status(id.status().code(), absl::StrCat("request ", i, ": ", id.status().message()));
    }
    ids.push_back(*id);
  }
  while (!Idle()) {
    if (auto step = Step(); !step.ok()) return step.status();
  }
  std::vector<GenerationResult> results;
  for (int64_t id : ids) {
    auto result = TakeResult(id);
    if (!result.ok()) return result.status();
    results.push_back(std::move(*result));
  }
  return results;
}

}  // namespace dslaunch::runtime
