// ZeroPartition: gradients, from backward to the shard the optimizer steps
// (accumulation over micro-steps, the reduce-scatter, the mean, the norm).
#include "runtime/zero/zero_partition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/zero/tensor_storage.h"

namespace dslaunch::runtime {

torch::Tensor ZeroPartition::FlatGradients(const Unit& unit) const {
  const torch::Tensor& first = params_[unit.first];
  // Written once: each gradient copied in, zeros only where there is none
  // (and in the padding), not a zero fill of the whole unit first.
  torch::Tensor all = torch::empty({unit.piece * shards_}, first.options());
  int64_t offset = 0;
  for (size_t i = unit.first; i < unit.end; ++i) {
    const torch::Tensor& p = params_[i];
    torch::Tensor slot = all.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      slot.copy_(p.grad().reshape({-1}));
    } else {
      slot.zero_();
    }
    offset += p.numel();
  }
  if (offset < all.numel()) all.narrow(0, offset, all.numel() - offset).zero_();
  return all;
}

absl::Status ZeroPartition::ScatterInto(torch::Tensor flat, int64_t piece, torch::Tensor mine) {
  if (comm_ != nullptr && size_ > 1) return comm_->ReduceScatter(flat, mine, ReduceOp::kSum);
  mine.copy_(flat.narrow(0, 0, piece));
  return absl::OkStatus();
}

void ZeroPartition::AddToAccumulator(const Unit& unit, const torch::Tensor& mine) {
  if (!accumulated_) {
    grad_accumulator_ = torch::zeros({shard_size_}, mine.options());
    accumulated_ = true;
  }
  grad_accumulator_.narrow(0, unit.shard_offset, unit.piece).add_(mine);
}

absl::Status ZeroPartition::AccumulateMicroStep() {
  if (stage() != 2) return absl::OkStatus();
  // Bucket by bucket; the full gradients are not kept between micro-steps:
  // that is stage 2. With overlapped units most were taken during backward
  // already; the rest (the same on every rank) go now.
  for (int u = 0; u < units(); ++u) {
    if (options_.overlap_units && !UnitHasGradients(u)) continue;
    if (absl::Status s = AccumulateUnitGradients(u); !s.ok()) return s;
  }
  return Drain();
}

bool ZeroPartition::UnitHasGradients(int u) const {
  const Unit& unit = units_[u];
  for (size_t i = unit.first; i < unit.end; ++i) {
    if (params_[i].grad().defined()) return true;
  }
  return false;
}

absl::Status ZeroPartition::AccumulateUnitGradients(int u) {
  torch::NoGradGuard no_grad;
  const Unit& unit = units_[u];
  torch::Tensor flat = FlatGradients(unit);
  for (size_t i = unit.first; i < unit.end; ++i) params_[i].mutable_grad() = torch::Tensor();
  auto reduce = [this, u, flat]() -> absl::Status {
    torch::NoGradGuard no_grad_on_worker;
    const Unit& unit = units_[u];
    torch::Tensor mine = torch::empty({unit.piece}, flat.options());
    absl::Status scattered = ScatterInto(flat, unit.piece, mine);
    // `flat` came from the training thread's stream; on the worker's stream
    // the scatter may still be reading it when this function returns.
    if (worker_) compat::KeepUntilCurrentStreamDone(flat);
    if (!scattered.ok()) return scattered;
    AddToAccumulator(unit, mine);
    if (streaming_) {
      // Note [Gradients to the host during backward]. A unit whose
      // gradients come twice in one backward is streamed again, whole.
      streamed_norms_.narrow(0, u, 1).copy_(
          MeanInto(grad_accumulator_.narrow(0, unit.shard_offset, unit.piece), unit.shard_offset, streamed_mean_,
                   /*asynchronous=*/true));
      streamed_units_[u] = 1;
    }
    return absl::OkStatus();
  };
  if (!worker_) return reduce();
  worker_->Submit(std::move(reduce));
  return absl::OkStatus();
}

absl::Status ZeroPartition::ReduceShardGradientSum() {
  torch::NoGradGuard no_grad;
  if (stage() >= 2) {
    if (stage() == 2) {
      if (absl::Status s = AccumulateMicroStep(); !s.ok()) return s;
    }
    // Stage 3: every reduce-scatter submitted during backward has landed.
    if (absl::Status s = Drain(); !s.ok()) return s;
    shard_gradient_sum_ = accumulated_ ? grad_accumulator_ : torch::zeros({shard_size_}, params_.front().options());
    return absl::OkStatus();
  }
  shard_gradient_sum_ = torch::empty({shard_size_}, params_.front().options());
  for (const Unit& unit : units_) {
    torch::Tensor flat = FlatGradients(unit);
    torch::Tensor mine = shard_gradient_sum_.narrow(0, unit.shard_offset, unit.piece);
    if (shards_ > 1) {
      // Stage 1: each rank needs only the sum of its own piece, which a
      // reduce-scatter delivers for half the bytes of an all-reduce.
      if (absl::Status s = ScatterInto(flat, unit.piece, mine); !s.ok()) return s;
      continue;
    }
    if (comm_ != nullptr && size_ > 1) {
      if (absl::Status s = comm_->AllReduce(flat, ReduceOp::kSum); !s.ok()) return s;
    }
    mine.copy_(flat);
  }
  return absl::OkStatus();
}

torch::Tensor ZeroPartition::MeanInto(const torch::Tensor& sum, int64_t shard_offset, torch::Tensor& mean,
                                      bool asynchronous) const {
  // Σ over ranks → mean, in fp32, and its squared norm in fp64, a chunk at a
  // time: a whole-shard fp32 and fp64 copy would need 12 bytes per element
  // on the device at once (9 GiB for a 1.2B-parameter shard).
  // (prescale_gradients is refused with ZeRO by the config: "not yet supported".)
  constexpr int64_t kChunk = int64_t{1} << 24;
  // The norm where the gradient is (a GPU reduces 86M values in microseconds;
  // the host would take a good part of a second).
  torch::Tensor norm = torch::zeros({1}, sum.options().dtype(torch::kDouble));
  for (int64_t begin = 0; begin < sum.numel(); begin += kChunk) {
    const int64_t length = std::min(kChunk, sum.numel() - begin);
    torch::Tensor chunk =
        sum.narrow(0, begin, length).to(torch::kFloat, false, /*copy=*/true).div_(static_cast<double>(data_parallel_size()));
    torch::Tensor squares = chunk.to(torch::kDouble).pow_(2);
    if (norm_weight_.defined()) {
      squares.mul_(norm_weight_.narrow(0, shard_offset + begin, length).to(squares.device()));
    }
    norm.add_(squares.sum());
    // Down into pinned memory when offloading from a GPU: an asynchronous
    // copy at full PCIe bandwidth instead of a pageable one.
    mean.narrow(0, shard_offset + begin, length).copy_(chunk, /*non_blocking=*/asynchronous);
  }
  return norm;
}

bool ZeroPartition::StreamsGradientsToHost() const {
  return offload() && worker_ != nullptr && (stage() == 3 || options_.overlap_units);
}

void ZeroPartition::BeginBackward(bool last_micro_step) {
  streaming_ = last_micro_step && StreamsGradientsToHost();
  if (!streaming_) return;
  const torch::Tensor& first = params_.front();
  streamed_mean_ = torch::empty(
      {shard_size_}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(first.is_cuda()));
  streamed_norms_ = torch::zeros({units()}, first.options().dtype(torch::kDouble));
  streamed_units_.assign(units_.size(), 0);
}

absl::Status ZeroPartition::PrepareShardGradient() {
  torch::NoGradGuard no_grad;
  if (absl::Status s = ReduceShardGradientSum(); !s.ok()) return s;
  const torch::Tensor& shard_sum = shard_gradient_sum_;
  torch::Tensor mean;
  if (streaming_) {
    // Note [Gradients to the host during backward]: the worker has drained;
    // what remains are the units without gradients in that backward (their
    // earlier micro-steps' sum, or zeros).
    streaming_ = false;
    mean = std::move(streamed_mean_);
    streamed_unit_count_ = 0;
    for (int u = 0; u < units(); ++u) {
      if (streamed_units_[u]) {
        ++streamed_unit_count_;
        continue;
      }
      const Unit& unit = units_[u];
      streamed_norms_.narrow(0, u, 1).copy_(
          MeanInto(shard_sum.narrow(0, unit.shard_offset, unit.piece), unit.shard_offset, mean, false));
    }
    local_norm_squared_ = streamed_norms_.sum().reshape({1});
    streamed_norms_ = torch::Tensor();
  } else {
    streamed_unit_count_ = 0;
    const auto shard_options = shard_sum.options().dtype(torch::kFloat);
    mean = offload()
               ? torch::empty({shard_size_}, shard_options.device(torch::kCPU).pinned_memory(shard_sum.is_cuda()))
               : torch::empty({shard_size_}, shard_options);
    local_norm_squared_ = MeanInto(shard_sum, 0, mean, /*asynchronous=*/false);
  }
  if (swapped_) {
    shard_gradient_ = mean;
  } else {
    master_shard_.mutable_grad() = mean;
  }
  shard_gradient_sum_ = torch::Tensor();  // not needed past the mean (and 2Ψ/N bytes on the device)
  return absl::OkStatus();
}

torch::Tensor ZeroPartition::ShardGradientSumSquares() const {
  if (norm_weight_.defined()) {
    return (shard_gradient_sum_.to(torch::kDouble).pow(2) * norm_weight_.to(shard_gradient_sum_.device())).sum().reshape({1});
  }
  std::vector<FusedAdamWEntry> entries;
  for (const Unit& unit : units_) {
    FusedAdamWEntry entry;
    entry.grad = shard_gradient_sum_.narrow(0, unit.shard_offset, unit.piece);
    entries.push_back(entry);
  }
  return FusedGradSumSquares(entries);
}

}  // namespace dslaunch::runtime
