// The ZeRO optimizer step of Engine::Step (engine.h): in place on the
// device (stage 0, or a shard's own step), fused into one kernel per shard
// (Note [Fused shard step]), or through the partitioned shards with their
// host and NVMe offload (Note [Step while uploading], Note [Delayed
// parameter update], Note [NVMe offload]).
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu_adam.h"
#include "kernels/cuda/fused_adamw_types.h"
#include "runtime/engine/engine.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

absl::StatusOr<StepResult> Engine::InPlaceZeroStep(StepResult begun) {
  return BoundaryStep("fused optimizer step", std::move(begun), [&](StepResult& result) -> absl::Status {
    std::vector<FusedAdamWEntry> entries = zero_->InPlaceEntries(shard_adam_->exp_avg(), shard_adam_->exp_avg_sq());
    torch::Tensor norm_squared = FusedGradSumSquares(entries);
    // One rank: its own losses are the group's (Note [Non-finite guard]).
    DS_ASSIGN_OR_RETURN(torch::Tensor bad_losses, TakeNonFiniteLosses(/*over_group=*/true));
    PoisonNorm(norm_squared, bad_losses);
    const auto [beta1, beta2] = ScheduledBetas();
    if (scaler_ == nullptr) {
      // Note [Clip on the device]: without a loss scaler no step is skipped,
      // so the step is queued right behind the norm and the kernel computes
      // the clip coefficient from it (the same function as UnscaleAndClip).
      // The norm is read for the result afterwards, which waits for the step
      // the trainer waits for anyway; reading it first drained the GPU twice
      // per step.
      result.lr = schedule_->LrAt(successful_steps_);
      shard_adam_->StepEntries(entries, result.lr, beta1, beta2, 1.0 / loss_scale(), norm_squared.data_ptr<double>(),
                               config_.gradient_clipping);
      const double read = norm_squared.item<double>();
      (void)UnscaleAndClip(read, &result);
      CountDeviceDecidedStep(read, &result);
    } else if (const std::optional<double> factor = UnscaleAndClip(norm_squared.item<double>(), &result); !factor) {
      ++skipped_steps_;
    } else {
      result.lr = schedule_->LrAt(successful_steps_);
      shard_adam_->StepEntries(entries, result.lr, beta1, beta2, *factor);
      result.stepped = true;
      ++successful_steps_;
    }
    zero_->ZeroGradients();
    return absl::OkStatus();
  });
}

absl::StatusOr<StepResult> Engine::FusedZeroStep(StepResult begun) {
  return BoundaryStep("fused ZeRO step", std::move(begun), [&](StepResult& result) -> absl::Status {
    absl::Status reduced = zero_->ReduceShardGradientSum();
    if (!reduced.ok()) return reduced;
    // Σ over ranks of the squared sums: the gradient is the sum over N ranks,
    // so the mean's squared norm is this over N², and its scale 1/N rides in
    // the kernel's coefficient (Note [Fused shard step]).
    torch::Tensor norm_squared = zero_->ShardGradientSumSquares();
    // Stage 0 (one piece) already holds the whole sum on every rank.
    const bool norm_over_group = data_parallel_ != nullptr && data_parallel_->size() > 1 && zero_->shards() > 1;
    // Note [Non-finite guard]: a NaN folded in before the sum reaches every
    // rank; where the norm is not summed, the loss counts are.
    DS_ASSIGN_OR_RETURN(torch::Tensor bad_losses, TakeNonFiniteLosses(/*over_group=*/!norm_over_group));
    PoisonNorm(norm_squared, bad_losses);
    if (norm_over_group) {
      absl::Status summed = data_parallel_->AllReduce(norm_squared, ReduceOp::kSum);
      if (!summed.ok()) return summed;
    }
    if (absl::Status s = SumOverModelParallelGroup(norm_squared); !s.ok()) return s;
    const double ranks = zero_->data_parallel_size();
    // Note [Clip on the device], as in InPlaceZeroStep: without a loss scaler
    // no step is skipped, and the kernel computes the coefficient itself.
    const bool clip_on_device = scaler_ == nullptr;
    std::optional<double> factor;
    if (!clip_on_device) factor = UnscaleAndClip(norm_squared.item<double>() / (ranks * ranks), &result);
    if (!clip_on_device && !factor) {
      ++skipped_steps_;
    } else {
      const auto [beta1, beta2] = ScheduledBetas();
      result.lr = schedule_->LrAt(successful_steps_);
      kernels::AdamWHyperparameters h = shard_adam_->CountStep(result.lr, beta1, beta2);
      if (clip_on_device) {
        h.grad_scale = 1.0 / (ranks * loss_scale());
        h.grad_norm_squared = norm_squared.data_ptr<double>();
        h.max_norm = config_.gradient_clipping;
      } else {
        h.grad_scale = *factor / ranks;
      }
      absl::Status stepped = zero_->StepFusedAndGather(h, shard_adam_->exp_avg(), shard_adam_->exp_avg_sq());
      if (!stepped.ok()) return stepped;
      // Read once the step is queued (the result's norm and coefficient).
      if (clip_on_device) {
        const double read = norm_squared.item<double>() / (ranks * ranks);
        (void)UnscaleAndClip(read, &result);
        CountDeviceDecidedStep(read, &result);
      } else {
        result.stepped = true;
        ++successful_steps_;
      }
    }
    zero_->ZeroGradients();
    return absl::OkStatus();
  });
}

absl::StatusOr<StepResult> Engine::ZeroStep(StepResult begun) {
  // Note [Parameters on NVMe]: never step on top of a failed step's half.
  DS_RETURN_IF_ERROR(zero_->CheckParametersCurrent());
  if (zero_->CanStepInPlace()) return InPlaceZeroStep(begun);
  if (zero_->CanStepFused()) return FusedZeroStep(begun);
  return BoundaryStep("ZeRO step", std::move(begun), [&](StepResult& result) -> absl::Status {
    // Note [Offload breakdown].
    const bool timed = zero_->offload() && config_.wall_clock_breakdown;
    auto now = [&] {
      if (timed) compat::SynchronizeDevice(device_);
      return std::chrono::steady_clock::now();
    };
    auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
    const auto started = now();
    absl::Status prepared = zero_->PrepareShardGradient();
    if (!prepared.ok()) return prepared;
    const auto prepared_at = now();
    // The global norm: every rank's shard sum, added up over the group on
    // the device, then read once.
    torch::Tensor sum = zero_->LocalGradNormSquared().clone();
    // Stage 0 (one piece) already holds the whole mean on every rank.
    const bool norm_over_group = data_parallel_ != nullptr && data_parallel_->size() > 1 && zero_->shards() > 1;
    DS_ASSIGN_OR_RETURN(torch::Tensor bad_losses, TakeNonFiniteLosses(/*over_group=*/!norm_over_group));
    PoisonNorm(sum, bad_losses);
    if (norm_over_group) {
      absl::Status reduced = data_parallel_->AllReduce(sum, ReduceOp::kSum);
      if (!reduced.ok()) return reduced;
    }
    if (absl::Status s = SumOverModelParallelGroup(sum); !s.ok()) return s;
    const std::optional<double> factor = UnscaleAndClip(sum.item<double>(), &result);
    if (delay_update_ && global_steps_ >= config_.zero_optimization.offload_optimizer.delay_update_warmup_steps) {
      // Note [Delayed parameter update]: finish step N-1 (wait, upload),
      // then hand this step to the host thread; a skipped step only finishes.
      const auto finish_from = now();
      std::vector<HostStepRange> ranges;
      double waited = 0, stepped_seconds = 0;
      // A skipped step starts no host step: nothing waits on upload events.
      if (absl::Status s = FinishHostStep(factor ? &ranges : nullptr, &waited, &stepped_seconds); !s.ok()) return s;
      const auto finished = now();
      if (!factor) {
        ++skipped_steps_;
      } else {
        const auto [beta1, beta2] = ScheduledBetas();
        result.lr = schedule_->LrAt(successful_steps_);
        StartHostStep(std::move(ranges), zero_->shard_gradient(), result.lr, beta1, beta2, *factor);
        result.stepped = true;
        ++successful_steps_;
      }
      if (timed) {
        offload_seconds_.gradients_to_host += seconds(started, prepared_at);
        offload_seconds_.norm_and_clip += seconds(prepared_at, finish_from);
        offload_seconds_.host_step_wait += waited;
        offload_seconds_.parameters_to_device += seconds(finish_from, finished) - waited;
        if (stepped_seconds > 0) {
          offload_seconds_.host_step += stepped_seconds;
          offload_seconds_.host_step_bytes += 28 * zero_->shard_size();
        }
      }
    } else if (!factor) {
      ++skipped_steps_;
    } else {
      // The clip coefficient rides in the step's one pass over the shard: a
      // separate `grad.mul_` on the host ran on one thread (OMP_NUM_THREADS=1
      // for ranks) and cost about half a second per step for 1.3B elements.
      const double coefficient = *factor;
      const torch::Tensor& grad = zero_->shard_gradient();
      const auto [beta1, beta2] = ScheduledBetas();
      result.lr = schedule_->LrAt(successful_steps_);
      const auto host_step_from = now();
      double host_step_seconds = 0;
      absl::Status gathered;
      if (SwappedShard* swapped = zero_->swapped()) {
        // Note [NVMe offload]: a sub-group at a time through the swap files.
        absl::Status stepped = shard_adam_->StepSwapped(
            *swapped, grad, result.lr, beta1, beta2, coefficient,
            [this](int64_t offset, const torch::Tensor& master) { return zero_->StoreUpdatedMaster(offset, master); });
        if (!stepped.ok()) return stepped;
        host_step_seconds = seconds(host_step_from, now());
        gathered = zero_->GatherParameters();
      } else if (zero_->offload()) {
        // Note [Step while uploading]: each range goes up while the next is
        // stepped. The step's share is timed on the host alone; what the
        // upload adds beyond it is the not-hidden rest.
        shard_adam_->CountStep(result.lr, beta1, beta2);
        torch::Tensor& master = zero_->master_shard();
        gathered = zero_->GatherParameters([&](int64_t offset, int64_t length) {
          const auto from = std::chrono::steady_clock::now();
          shard_adam_->StepRange(master, grad, offset, length, result.lr, beta1, beta2, coefficient,
                                 zero_->host_parameter_copy());
          host_step_seconds += seconds(from, std::chrono::steady_clock::now());
        });
      } else {
        shard_adam_->Step(zero_->master_shard(), grad, result.lr, beta1, beta2, coefficient);
        gathered = zero_->GatherParameters();
      }
      if (!gathered.ok()) return gathered;
      if (timed) {
        const auto done = now();
        offload_seconds_.gradients_to_host += seconds(started, prepared_at);
        offload_seconds_.norm_and_clip += seconds(prepared_at, host_step_from);
        offload_seconds_.host_step += host_step_seconds;
        offload_seconds_.parameters_to_device += seconds(host_step_from, done) - host_step_seconds;
        offload_seconds_.host_step_bytes += 28 * zero_->shard_size();
      }
      result.stepped = true;
      ++successful_steps_;
    }
    zero_->ZeroGradients();
    return absl::OkStatus();
  });
}

}  // namespace dslaunch::runtime
