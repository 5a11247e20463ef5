// Note [Mixture of experts]: the step over the dense partition and the
// experts' partition, with one gradient norm and one clip coefficient.
#include "runtime/engine/engine.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

absl::StatusOr<StepResult> Engine::ExpertParallelStep(StepResult begun) {
  return BoundaryStep("expert-parallel step", std::move(begun), [&](StepResult& result) -> absl::Status {
    if (absl::Status s = zero_->PrepareShardGradient(); !s.ok()) return s;
    if (absl::Status s = expert_zero_->PrepareShardGradient(); !s.ok()) return s;
    // One norm over both partitions, summed over the data-parallel group:
    // each partition's squared sum is weighted so that the sum counts every
    // element once (a partition cut into one piece is whole on each rank of
    // its group: only the group's first rank counts it). The experts of
    // other expert-parallel ranks are other elements, so they all count.
    auto counted = [](const ZeroPartition& partition, const Communicator* group) {
      const bool whole_everywhere = partition.shards() == 1 && group != nullptr && group->rank() != 0;
      return partition.LocalGradNormSquared() * (whole_everywhere ? 0.0 : 1.0);
    };
    torch::Tensor sum = counted(*zero_, data_parallel_) + counted(*expert_zero_, parallel_->expert_data());
    DS_ASSIGN_OR_RETURN(torch::Tensor bad_losses, TakeNonFiniteLosses(/*over_group=*/false));
    PoisonNorm(sum, bad_losses);
    if (data_parallel_ != nullptr) {
      if (absl::Status s = data_parallel_->AllReduce(sum, ReduceOp::kSum); !s.ok()) return s;
    }
    const std::optional<double> factor = UnscaleAndClip(sum.item<double>(), &result);
    if (!factor) {
      ++skipped_steps_;
    } else {
      const auto [beta1, beta2] = ScheduledBetas();
      result.lr = schedule_->LrAt(successful_steps_);
      for (auto [partition, adam] :
           {std::pair{zero_.get(), shard_adam_.get()}, std::pair{expert_zero_.get(), expert_adam_.get()}}) {
        if (SwappedShard* swapped = partition->swapped()) {
          // Note [NVMe offload]: a sub-group at a time through the swap files.
          DS_RETURN_IF_ERROR(adam->StepSwapped(
              *swapped, partition->shard_gradient(), result.lr, beta1, beta2, *factor,
              [partition](int64_t offset, const torch::Tensor& master) { return partition->StoreUpdatedMaster(offset, master); }));
          DS_RETURN_IF_ERROR(partition->GatherParameters());
        } else if (partition->offload()) {
          // Note [Step while uploading], as the dense step: each range is
          // stepped on the host (writing the rounded parameters into the
          // partition's host copy, Note [bf16 parameters from the host
          // step]) while the one before goes up.
          adam->CountStep(result.lr, beta1, beta2);
          torch::Tensor& master = partition->master_shard();
          const torch::Tensor& grad = partition->shard_gradient();
          const double coefficient = *factor;
          DS_RETURN_IF_ERROR(partition->GatherParameters([&](int64_t offset, int64_t length) {
            adam->StepRange(master, grad, offset, length, result.lr, beta1, beta2, coefficient,
                            partition->host_parameter_copy());
          }));
        } else {
          adam->Step(partition->master_shard(), partition->shard_gradient(), result.lr, beta1, beta2, *factor);
          DS_RETURN_IF_ERROR(partition->GatherParameters());
        }
      }
      result.stepped = true;
      ++successful_steps_;
    }
    zero_->ZeroGradients();
    expert_zero_->ZeroGradients();
    return absl::OkStatus();
  });
}

}  // namespace dslaunch::runtime
