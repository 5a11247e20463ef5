#include "runtime/generate/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::Status CheckSamplingOptions(const SamplingOptions& options, const std::string& where) {
  if (!options.greedy && !(options.temperature > 0 && std::isfinite(options.temperature))) {
    return absl::InvalidArgumentError(absl::StrCat(where, "temperature must be > 0 (got ", options.temperature, ")"));
  }
  if (options.top_k < 0) return absl::InvalidArgumentError(absl::StrCat(where, "top_k must be >= 0 (got ", options.top_k, ")"));
  if (!(options.top_p > 0 && options.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "top_p must be in (0, 1] (got ", options.top_p, ")"));
  }
  if (!(options.repetition_penalty > 0 && std::isfinite(options.repetition_penalty))) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "repetition_penalty must be > 0 (got ", options.repetition_penalty, ")"));
  }
  if (options.top_logprobs < 0 || options.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "top_logprobs must be in [0, ", kMaxTopLogprobs, "] (got ", options.top_logprobs, ")"));
  }
  return absl::OkStatus();
}

namespace {

// The k most probable of `logprobs` [vocab] (double), most probable first; a
// stable sort, so equal log-probabilities keep the lower id first.
std::vector<TokenLogprob> TopLogprobs(const torch::Tensor& logprobs, int64_t k) {
  std::vector<TokenLogprob> top;
  k = std::min<int64_t>(k, logprobs.size(0));
  if (k <= 0) return top;
  const torch::Tensor order = std::get<1>(logprobs.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true)).slice(0, 0, k);
  const torch::Tensor values = logprobs.index_select(0, order);
  for (int64_t i = 0; i < k; ++i) top.push_back(TokenLogprob{order[i].item<int64_t>(), values[i].item<double>()});
  return top;
}

}  // namespace

SampledToken SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator,
                         const std::vector<int64_t>& seen) {
  torch::Tensor scores = logits.detach().to(torch::kCPU, torch::kDouble).reshape({-1});
  torch::Tensor logprobs = torch::log_softmax(scores, 0);
  if (options.repetition_penalty != 1.0 && !seen.empty()) {
    torch::Tensor ids = std::get<0>(at::_unique(torch::tensor(seen, torch::kLong)));
    torch::Tensor picked = scores.index_select(0, ids);
    picked = torch::where(picked > 0, picked / options.repetition_penalty, picked * options.repetition_penalty);
    scores = scores.index_copy(0, ids, picked);
  }
  SampledToken token;
  if (options.greedy) {
    token.id = scores.argmax().item<int64_t>();
  } else {
    scores = scores / options.temperature;
    if (options.top_k > 0 && options.top_k < scores.size(0)) {
      // Ties with the k-th score stay, as transformers' TopKLogitsWarper.
      const double kth = std::get<0>(scores.topk(options.top_k)).min().item<double>();
      scores = scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());
    }
    torch::Tensor probabilities = torch::softmax(scores, 0);
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
  token.top = TopLogprobs(logprobs, options.top_logprobs);
  return token;
}

SampledToken ScoreToken(const torch::Tensor& logits, int64_t token, int64_t top_logprobs) {
  const torch::Tensor logprobs = torch::log_softmax(logits.detach().to(torch::kCPU, torch::kDouble).reshape({-1}), 0);
  return SampledToken{token, logprobs[token].item<double>(), TopLogprobs(logprobs, top_logprobs)};
}

}  // namespace dslaunch::runtime
