#include "runtime/zero/zero_partition.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

ZeroPartition::ZeroPartition(int stage, std::vector<torch::Tensor> params, Communicator* comm,
                             bool offload)
    : stage_(stage), offload_(offload), params_(std::move(params)), comm_(comm) {}

absl::StatusOr<std::unique_ptr<ZeroPartition>> ZeroPartition::Create(
    int stage, std::vector<torch::Tensor> params, Communicator* comm, bool offload) {
  if (stage < 0 || stage > 2) {
    return absl::InvalidArgumentError(absl::StrCat("ZeroPartition: stage ", stage, " (0, 1 or 2)"));
  }
  std::unique_ptr<ZeroPartition> zero(new ZeroPartition(stage, std::move(params), comm, offload));
  zero->rank_ = comm ? comm->rank() : 0;
  zero->size_ = comm ? comm->size() : 1;
  // Stage 0: one range, the whole vector, on every rank.
  zero->shards_ = stage == 0 ? 1 : zero->size_;
  zero->shard_rank_ = stage == 0 ? 0 : zero->rank_;
  for (const auto& p : zero->params_) zero->total_ += p.numel();
  zero->shard_size_ = (zero->total_ + zero->shards_ - 1) / zero->shards_;
  torch::NoGradGuard no_grad;
  // The fp32 master of our range, cut from the flattened parameters.
  std::vector<torch::Tensor> flat;
  for (const auto& p : zero->params_) flat.push_back(p.detach().reshape({-1}).to(torch::kFloat));
  torch::Tensor all = torch::cat(flat);
  const int64_t padded = zero->shard_size_ * zero->shards_;
  if (padded > zero->total_) {
    all = torch::cat({all, torch::zeros({padded - zero->total_}, all.options())});
  }
  torch::Tensor shard = all.narrow(0, zero->shard_begin(), zero->shard_size_).clone();
  if (offload) {
    shard = shard.to(torch::kCPU);
    // Pinned host memory makes the copies to and from the GPU asynchronous.
    if (zero->params_.front().is_cuda()) shard = shard.pin_memory();
  }
  zero->master_shard_ = shard.requires_grad_(true);
  return zero;
}

torch::Tensor ZeroPartition::FlatGradients() const {
  std::vector<torch::Tensor> flat;
  for (const auto& p : params_) {
    flat.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
  }
  torch::Tensor all = torch::cat(flat);
  const int64_t padded = shard_size_ * shards_;
  if (padded > total_) all = torch::cat({all, torch::zeros({padded - total_}, all.options())});
  return all;
}

absl::Status ZeroPartition::AccumulateMicroStep() {
  if (stage_ != 2) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  torch::Tensor flat = FlatGradients();
  torch::Tensor mine = torch::empty({shard_size_}, flat.options());
  if (comm_ != nullptr && size_ > 1) {
    absl::Status scattered = comm_->ReduceScatter(flat, mine, ReduceOp::kSum);
    if (!scattered.ok()) return scattered;
  } else {
    mine.copy_(flat);
  }
  if (accumulated_) {
    grad_accumulator_.add_(mine);
  } else {
    grad_accumulator_ = mine;
    accumulated_ = true;
  }
  // The full gradients are not kept between micro-steps: that is stage 2.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  return absl::OkStatus();
}

absl::Status ZeroPartition::PrepareShardGradient() {
  torch::NoGradGuard no_grad;
  torch::Tensor shard_sum;
  if (stage_ == 2) {
    absl::Status accumulated = AccumulateMicroStep();
    if (!accumulated.ok()) return accumulated;
    shard_sum = grad_accumulator_;
  } else {
    torch::Tensor flat = FlatGradients();
    if (comm_ != nullptr && size_ > 1) {
      absl::Status reduced = comm_->AllReduce(flat, ReduceOp::kSum);
      if (!reduced.ok()) return reduced;
    }
    shard_sum = flat.narrow(0, shard_begin(), shard_size_);
  }
  // Σ over ranks → mean, in fp32. (prescale_gradients is refused with ZeRO
  // by the config: "not yet supported".)
  torch::Tensor mean = shard_sum.to(torch::kFloat) / static_cast<double>(size_);
  // The norm where the gradient is (a GPU reduces 86M values in microseconds;
  // the host would take a good part of a second).
  local_norm_squared_ = mean.to(torch::kDouble).pow(2).sum().item<double>();
  if (offload_) {
    // Down into pinned memory when the gradient is on a GPU: an asynchronous
    // copy at full PCIe bandwidth instead of a pageable one.
    torch::Tensor host = torch::empty(mean.sizes(), mean.options().device(torch::kCPU).pinned_memory(mean.is_cuda()));
    host.copy_(mean);
    master_shard_.mutable_grad() = host;
  } else {
    master_shard_.mutable_grad() = mean;
  }
  return absl::OkStatus();
}

double ZeroPartition::LocalGradNormSquared() const { return local_norm_squared_; }

absl::Status ZeroPartition::GatherParameters() {
  torch::NoGradGuard no_grad;
  const auto dtype = params_.front().scalar_type();
  torch::Tensor mine = master_shard_.detach().to(params_.front().device(), dtype);
  torch::Tensor all = torch::empty({shard_size_ * shards_}, mine.options());
  if (comm_ != nullptr && shards_ > 1) {
    absl::Status gathered = comm_->AllGather(mine, all);
    if (!gathered.ok()) return gathered;
  } else {
    all.copy_(mine);
  }
  int64_t offset = 0;
  for (auto& p : params_) {
    p.copy_(all.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  return absl::OkStatus();
}

void ZeroPartition::ZeroGradients() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad() = stage_ == 2 ? torch::Tensor() : p.grad().zero_();
  }
  master_shard_.mutable_grad() = torch::Tensor();
  grad_accumulator_ = torch::Tensor();
  accumulated_ = false;
}

int64_t ZeroPartition::GradientBytes() const {
  if (stage_ == 2) {
    // The persistent shard accumulator, in the gradients' dtype.
    return shard_size_ * params_.front().element_size();
  }
  int64_t bytes = 0;
  for (const auto& p : params_) bytes += p.numel() * p.element_size();
  return bytes;
}

torch::Tensor ZeroPartition::ShardOf(const torch::Tensor& full_unpadded) const {
  torch::Tensor all = full_unpadded.to(torch::kFloat).reshape({-1}).narrow(0, 0, total_);
  const int64_t padded = shard_size_ * shards_;
  if (padded > total_) all = torch::cat({all, torch::zeros({padded - total_}, all.options())});
  return all.narrow(0, shard_begin(), shard_size_).clone().to(master_shard_.device());
}

}  // namespace dslaunch::runtime
