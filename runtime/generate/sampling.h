// Choosing the next token from a model's logits, as Hugging Face's generate
// does: the repetition penalty over the tokens seen so far, then greedy
// (argmax), or sampling at a temperature from the top_k most probable tokens
// and, of those, the smallest set whose probabilities reach top_p (nucleus
// sampling). The order is transformers': penalty, temperature, top-k, top-p.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace dslaunch::runtime {

struct SamplingOptions {
  bool greedy = true;
  double temperature = 1.0;         // > 0
  int64_t top_k = 0;                // 0: every token
  double top_p = 1.0;               // (0, 1]
  double repetition_penalty = 1.0;  // > 0; 1: none (CTRL's: a seen token's logit / p if > 0, else · p)
  uint64_t seed = 0;
  // Also return this many of the most probable tokens at each position,
  // with their log-probabilities (OpenAI's top_logprobs), at most
  // kMaxTopLogprobs.
  int64_t top_logprobs = 0;
};

inline constexpr int64_t kMaxTopLogprobs = 20;

// InvalidArgument naming the field (prefixed by `where`, e.g. "--" or
// "request ") when a value is out of its range.
absl::Status CheckSamplingOptions(const SamplingOptions& options, const std::string& where);

// A token and its log-probability under the model: the raw distribution
// (temperature 1, no penalty, top-k or top-p), as vLLM's logprobs by default.
struct TokenLogprob {
  int64_t id = 0;
  double logprob = 0;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampledToken {
  int64_t id = 0;
  double logprob = 0;  // of `id`, as TokenLogprob's
  // With options.top_logprobs = k: the k most probable tokens, most probable
  // first (ties: the lower id first).
  std::vector<TokenLogprob> top;
};

// `logits` [vocab], any floating dtype. `seen`: the tokens the repetition
// penalty applies to (the prompt and what was generated). `generator` draws
// the samples (the same seed gives the same continuation).
SampledToken SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator,
                         const std::vector<int64_t>& seen = {});

// A token that was given, not drawn (a prompt's): its log-probability under
// `logits` [vocab] and the `top_logprobs` most probable tokens, as
// SampleToken's.
SampledToken ScoreToken(const torch::Tensor& logits, int64_t token, int64_t top_logprobs);

}  // namespace dslaunch::runtime
