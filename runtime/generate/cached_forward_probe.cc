#include "runtime/generate/cached_forward_probe.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "runtime/generate/paged_kv_cache.h"

namespace dslaunch::runtime {

double ProbeRelativeTolerance(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return 5e-2;
    case torch::kHalf:
      return 2e-2;
    default:
      return 1e-4;
  }
}

absl::StatusOr<ProbeReport> ProbeCachedForward(Llama& model, const std::vector<int64_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return absl::InvalidArgumentError("the probe prompt needs at least 2 tokens");
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor any = model->parameters().front();
  const torch::Device device = any.device();
  const LlamaOptions& llama = model->options();
  ProbeReport report;
  report.positions = n;
  try {
    const torch::Tensor ids = torch::tensor(tokens, torch::kLong).view({1, -1}).to(device);
    const torch::Tensor full = model->forward(ids)[0].to(torch::kCPU, torch::kDouble);  // [n, vocab]

    PagedKvCacheOptions cache_options;
    cache_options.layers = llama.layers;
    cache_options.kv_heads = llama.kv_heads / std::max(1, llama.tensor_parallel.size);  // this rank's
    cache_options.head_dim = llama.head_dim;
    cache_options.block_size = 4;  // the probe spans several blocks
    cache_options.blocks = (n + 3) / 4 + 1;
    cache_options.dtype = any.scalar_type();
    cache_options.device = device;
    auto cache = PagedKvCache::Create(cache_options);
    if (!cache.ok()) return cache.status();
    if (absl::Status reserved = (*cache)->Reserve(/*sequence=*/1, n); !reserved.ok()) return reserved;
    std::vector<torch::Tensor> rows;
    auto run = [&](int64_t first, int64_t count) -> absl::Status {
      auto step = (*cache)->BeginStep({StepPiece{1, first, count}});
      if (!step.ok()) return step.status();
      const torch::Tensor piece = ids.slice(1, first, first + count);
      const torch::Tensor positions = torch::arange(first, first + count, torch::kLong);
      rows.push_back(model->ForwardWithCache(piece, positions, **step, torch::arange(count, torch::kLong))
                         .to(torch::kCPU, torch::kDouble));
      return absl::OkStatus();
    };
    const int64_t split = n / 2;
    if (absl::Status s = run(0, split); !s.ok()) return s;
    for (int64_t p = split; p < n; ++p) {
      if (absl::Status s = run(p, 1); !s.ok()) return s;
    }
    const torch::Tensor cached = torch::cat(rows, 0);
    const torch::Tensor difference = (cached - full).abs().amax(1);  // [n]
    report.worst_position = difference.argmax().item<int64_t>();
    report.max_abs_difference = difference.max().item<double>();
    report.largest_logit = full.abs().max().item<double>();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("the logit probe: ", e.what_without_backtrace()));
  }
  report.tolerance = ProbeRelativeTolerance(any.scalar_type()) * std::max(1.0, report.largest_logit);
  if (!(report.max_abs_difference <= report.tolerance)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the cached generation forward disagrees with the training forward on the probe prompt: at position %d "
        "of %d a logit differs by %.6g (allowed %.6g, the largest |logit| is %.6g); refusing to generate",
        report.worst_position, report.positions, report.max_abs_difference, report.tolerance, report.largest_logit));
  }
  return report;
}

}  // namespace dslaunch::runtime
