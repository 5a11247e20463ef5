#include "runtime/generate/sampling.h"

namespace dslaunch::runtime {

SampledToken SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  torch::Tensor scores = logits.detach().to(torch::kCPU, torch::kDouble).reshape({-1});
  torch::Tensor logprobs = torch::log_softmax(scores, 0);
  SampledToken token;
  if (options.greedy) {
    token.id = scores.argmax().item<int64_t>();
  } else {
    torch::Tensor probabilities = torch::softmax(scores / options.temperature, 0);
    if (options.top_p < 1.0) {
      // Keep the most probable tokens until their mass reaches top_p (the
      // token that crosses it included), as transformers' TopPLogitsWarper.
      auto [sorted, order] = probabilities.sort(/*dim=*/0, /*descending=*/true);
      torch::Tensor before = sorted.cumsum(0) - sorted;  // mass of the tokens ranked above
      torch::Tensor drop = before >= options.top_p;
      sorted.masked_fill_(drop, 0.0);
      probabilities = torch::zeros_like(probabilities).scatter_(0, order, sorted);
    }
    token.id = torch::multinomial(probabilities, 1, /*replacement=*/false, generator).item<int64_t>();
  }
  token.logprob = logprobs[token.id].item<double>();
  return token;
}

}  // namespace dslaunch::runtime
