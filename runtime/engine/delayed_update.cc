// Note [Delayed parameter update] (engine.h): the host step on its own thread,
// finished by the next Step() or by whatever must see current parameters.
#include "runtime/engine/engine.h"

#include <chrono>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

absl::Status Engine::ApplyPendingUpdate() { return FinishHostStep(nullptr, nullptr, nullptr); }

absl::Status Engine::FinishHostStep(std::vector<HostStepRange>* uploaded, double* waited, double* stepped_seconds) {
  if (!host_step_.valid()) return absl::OkStatus();
  const auto from = std::chrono::steady_clock::now();
  auto [status, seconds] = host_step_.get();
  if (waited != nullptr) *waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  if (stepped_seconds != nullptr) *stepped_seconds = seconds;
  if (!status.ok()) return status;
  try {
    torch::NoGradGuard no_grad;
    // Each range's device event is recorded where the next range begins
    // (and after the last): the copy of a range is queued between the two.
    absl::Status gathered = zero_->GatherParameters([&](int64_t offset, int64_t length) {
      if (uploaded == nullptr) return;
      if (!uploaded->empty()) uploaded->back().uploaded = compat::StreamPoint::OnCurrentStream(device_);
      uploaded->push_back(HostStepRange{offset, length, {}});
    });
    if (uploaded != nullptr && !uploaded->empty()) {
      uploaded->back().uploaded = compat::StreamPoint::OnCurrentStream(device_);
    }
    return gathered;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("delayed parameter update: ", e.what_without_backtrace()));
  }
}

void Engine::StartHostStep(std::vector<HostStepRange> ranges, const torch::Tensor& gradient, double lr, double beta1,
                           double beta2, double grad_scale) {
  const int64_t size = zero_->shard_size();
  if (ranges.empty()) {
    // Nothing went up (the first step, or after a skipped one): the shard in
    // the upload's ranges, with nothing to wait for.
    for (int64_t begin = 0; begin < size; begin += ZeroPartition::kUploadRangeElements) {
      ranges.push_back(HostStepRange{begin, std::min(ZeroPartition::kUploadRangeElements, size - begin), {}});
    }
  }
  shard_adam_->CountStep(lr, beta1, beta2);
  // Detached handles: the training thread goes on setting the master's
  // gradient (the next step's, in another buffer) while this one steps.
  torch::Tensor master = zero_->master_shard().detach();
  torch::Tensor grad = gradient.detach();
  torch::Tensor rounded = zero_->host_parameter_copy();  // Note [bf16 parameters from the host step]
  ShardAdam* adam = shard_adam_.get();
  host_step_ = std::async(std::launch::async, [=, ranges = std::move(ranges)]() mutable {
    const auto from = std::chrono::steady_clock::now();
    try {
      torch::NoGradGuard no_grad;
      for (const HostStepRange& range : ranges) {
        range.uploaded.WaitOnHost();
        adam->StepRange(master, grad, range.offset, range.length, lr, beta1, beta2, grad_scale, rounded);
      }
    } catch (const c10::Error& e) {
      return std::pair{absl::InternalError(absl::StrCat("delayed host step: ", e.what_without_backtrace())), 0.0};
    }
    return std::pair{absl::OkStatus(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count()};
  });
}

}  // namespace dslaunch::runtime
