// Choosing the next token from a model's logits, as Hugging Face's generate
// does: greedy (argmax), or sampling at a temperature from the smallest set
// of tokens whose probabilities reach top_p (nucleus sampling).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace dslaunch::runtime {

struct SamplingOptions {
  bool greedy = true;
  double temperature = 1.0;  // > 0
  double top_p = 1.0;        // (0, 1]
  uint64_t seed = 0;
};

struct SampledToken {
  int64_t id = 0;
  double logprob = 0;  // log-probability of `id` under the model (temperature 1, no top-p)
};

// `logits` [vocab], any floating dtype. `generator` draws the samples (the
// same seed gives the same continuation).
SampledToken SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

}  // namespace dslaunch::runtime
