// ZeroPartition: parameters, from the stepped shard back to whole units
// (gathers, the step fused with the upload, swapped master weights).
#include "runtime/zero/zero_partition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/zero/tensor_storage.h"

namespace dslaunch::runtime {
namespace {

// Note [Host shard to the device]: an fp32 host shard (pinned when
// offloaded) into parameters of another dtype on a GPU, 16M elements at a
// time: each chunk goes up as it is (an asynchronous copy from pinned memory
// at the link's speed) and is converted there. LibTorch's own cross-device
// copy with a change of dtype converts on the host first and copies the
// result up from pageable memory.
void CopyToParameters(const torch::Tensor& source, torch::Tensor target) {
  if (!target.is_cuda() || source.is_cuda() || source.scalar_type() == target.scalar_type()) {
    target.copy_(source, /*non_blocking=*/source.is_pinned());
    return;
  }
  constexpr int64_t kChunk = int64_t{1} << 24;
  for (int64_t begin = 0; begin < source.numel(); begin += kChunk) {
    const int64_t length = std::min(kChunk, source.numel() - begin);
    torch::Tensor staged = source.narrow(0, begin, length).to(target.device(), /*non_blocking=*/source.is_pinned());
    target.narrow(0, begin, length).copy_(staged);
  }
}

}  // namespace

absl::Status ZeroPartition::StartGather(int u) {
  if (gathered_[u]) return absl::OkStatus();
  if (absl::Status current = CheckParametersCurrent(); !current.ok()) return current;
  const Unit& unit = units_[u];
  torch::Tensor& full = full_[u];
  // The memory is taken here, on the training thread; the worker fills it.
  ResizeStorage(full, static_cast<size_t>(full.numel()) * full.element_size());
  gathered_[u] = true;
  peak_live_ = std::max(peak_live_, LiveElements());
  auto gather = [this, &unit, full]() -> absl::Status {
    torch::NoGradGuard no_grad_on_worker;
    torch::Tensor mine;
    if (parameter_files_) {
      absl::StatusOr<torch::Tensor> read = ReadParameterPiece(unit);
      if (!read.ok()) return read.status();
      mine = *read;
    } else {
      mine = param_shard_.narrow(0, unit.shard_offset, unit.piece);
    }
    if (mine.device() != full.device()) mine = mine.to(full.device());
    torch::Tensor target = full;
    if (comm_ != nullptr && shards_ > 1) return comm_->AllGather(mine, target);
    target.copy_(mine);
    return absl::OkStatus();
  };
  pending_[u] = worker_->Submit(std::move(gather));
  return absl::OkStatus();
}

absl::Status ZeroPartition::GatherUnit(int u) {
  if (absl::Status s = StartGather(u); !s.ok()) return s;
  if (!pending_[u]) return absl::OkStatus();
  absl::Status status = pending_[u]->Wait();
  pending_[u].reset();
  if (!status.ok()) {
    ResizeStorage(full_[u], 0);
    gathered_[u] = false;
  }
  return status;
}

void ZeroPartition::ReleaseUnit(int u) {
  if (stage() != 3 || units_[u].persistent || !gathered_[u]) return;
  if (pending_[u]) {
    (void)pending_[u]->Wait();  // never free memory the worker is writing (its error surfaces at Drain)
    pending_[u].reset();
  }
  ResizeStorage(full_[u], 0);
  gathered_[u] = false;
}

absl::Status ZeroPartition::Drain() { return worker_ ? worker_->Drain() : absl::OkStatus(); }

namespace {

// Note [Step while uploading]: source's [offset, offset + target.numel())
// into target, each range stepped first when step_range is given.
// With `rounded` (Note [bf16 parameters from the host step]) each stepped
// range goes up from there instead.
void StepAndCopyToParameters(const torch::Tensor& source, const torch::Tensor& rounded, int64_t offset,
                             torch::Tensor target, const ZeroPartition::StepRange& step_range) {
  if (!step_range) {
    CopyToParameters(source.narrow(0, offset, target.numel()), target);
    return;
  }
  const torch::Tensor& from = rounded.defined() ? rounded : source;
  // Stage 3's host parameter shard as the copy: the step wrote it in place.
  const bool in_place = rounded.defined() && rounded.data_ptr() == target.data_ptr() && offset == 0;
  for (int64_t begin = 0; begin < target.numel(); begin += ZeroPartition::kUploadRangeElements) {
    const int64_t length = std::min(ZeroPartition::kUploadRangeElements, target.numel() - begin);
    step_range(offset + begin, length);
    if (!in_place) CopyToParameters(from.narrow(0, offset + begin, length), target.narrow(0, begin, length));
  }
}

}  // namespace

absl::Status ZeroPartition::GatherParameters(const StepRange& step_range) {
  torch::NoGradGuard no_grad;
  if (step_range && swapped_) {
    return absl::InternalError("GatherParameters: NVMe offload steps the shard itself (Note [Step while uploading])");
  }
  if (stage() == 3) {
    if (absl::Status s = Drain(); !s.ok()) return s;
    if (parameter_files_) {
      // Note [Parameters on NVMe]: the new values into the files, range by
      // range (the NVMe optimizer's step already stored them).
      if (!swapped_) {
        // The CPU Adam's bf16 copy where it wrote one (Note [bf16 parameters
        // from the host step]), else the master, rounded as it is stored.
        const torch::Tensor from = step_range && host_parameter_copy_.defined() ? host_parameter_copy_
                                                                                : master_shard_.detach();
        for (int64_t begin = 0; begin < shard_size_; begin += kUploadRangeElements) {
          const int64_t length = std::min(kUploadRangeElements, shard_size_ - begin);
          if (step_range) step_range(begin, length);
          if (absl::Status s = StoreParameters(begin, from.narrow(0, begin, length)); !s.ok()) return s;
        }
      }
      if (absl::Status s = FinishParameterUpdate(); !s.ok()) return s;
      return RegatherPersistentUnits();
    }
    // With NVMe offload the step already wrote it (StoreUpdatedMaster).
    if (swapped_) return RegatherPersistentUnits();
    // Note [bf16 parameters from the host step]: under the delayed update the
    // step wrote a second host shard beside the one the forward read; the
    // two trade places instead of 2 bytes per element being copied across.
    const bool trade = step_range && host_parameter_copy_.defined() && !host_parameter_copy_.is_same(param_shard_) &&
                       host_parameter_copy_.device() == param_shard_.device();
    if (trade) {
      for (int64_t begin = 0; begin < param_shard_.numel(); begin += kUploadRangeElements) {
        step_range(begin, std::min(kUploadRangeElements, param_shard_.numel() - begin));
      }
      std::swap(param_shard_, host_parameter_copy_);
    } else {
      StepAndCopyToParameters(master_shard_.detach(), host_parameter_copy_, 0, param_shard_, step_range);
    }
    return RegatherPersistentUnits();
  }
  const torch::Tensor& updated = swapped_ ? updated_parameters_ : master_shard_;
  for (const Unit& unit : units_) {
    torch::Tensor mine = torch::empty({unit.piece}, params_.front().options());
    StepAndCopyToParameters(updated.detach(), host_parameter_copy_, unit.shard_offset, mine, step_range);
    torch::Tensor all = torch::empty({unit.piece * shards_}, mine.options());
    if (comm_ != nullptr && shards_ > 1) {
      absl::Status gathered = comm_->AllGather(mine, all);
      if (!gathered.ok()) return gathered;
    } else {
      all.copy_(mine);
    }
    CopyIntoParameters(unit, all);
  }
  return absl::OkStatus();
}

absl::Status ZeroPartition::StoreUpdatedMaster(int64_t offset, const torch::Tensor& master) {
  torch::NoGradGuard no_grad;
  if (parameter_files_) return StoreParameters(offset, master);
  torch::Tensor& target = stage() == 3 ? param_shard_ : updated_parameters_;
  target.narrow(0, offset, master.numel()).copy_(master);
  return absl::OkStatus();
}

absl::Status ZeroPartition::StageSwappedMaster(bool read) {
  if (!swapped_) return absl::OkStatus();
  if (!read) {
    master_shard_ = torch::zeros({swapped_->elements()});
    return absl::OkStatus();
  }
  auto master = swapped_->ReadWhole(0);
  if (!master.ok()) return master.status();
  master_shard_ = *master;
  return absl::OkStatus();
}

absl::Status ZeroPartition::UnstageSwappedMaster(bool write_back) {
  if (!swapped_) return absl::OkStatus();
  if (write_back) {
    // A load rewrites every parameter file: an update a failed step left open goes.
    if (parameter_files_ && update_.open) AbandonParameterUpdate();
    if (absl::Status s = swapped_->WriteWhole(0, master_shard_); !s.ok()) return s;
    if (absl::Status s = StoreUpdatedMaster(0, master_shard_.detach()); !s.ok()) return s;
    if (absl::Status s = FinishParameterUpdate(); !s.ok()) return s;
  }
  master_shard_ = torch::Tensor();
  return absl::OkStatus();
}

void ZeroPartition::CopyIntoParameters(const Unit& unit, const torch::Tensor& all) {
  int64_t offset = 0;
  for (size_t i = unit.first; i < unit.end; ++i) {
    torch::Tensor& p = params_[i];
    p.copy_(all.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
}

bool ZeroPartition::CanStepInPlace() const {
  // Stage 2 qualifies while every gradient is still where autograd put it:
  // nothing accumulated into the shard from earlier micro-steps and no
  // overlapped reduction during backward.
  const bool gradients_in_place = stage() <= 1 || (stage() == 2 && !accumulated_ && !options_.overlap_units);
  // Its norm pass counts every parameter (ZeroOptions::norm_counts).
  return shards_ == 1 && size_ == 1 && gradients_in_place && !offload() && master_shard_.is_cuda() &&
         FusedAdamWAvailable() && options_.norm_counts.empty();
}

std::vector<FusedAdamWEntry> ZeroPartition::InPlaceEntries(const torch::Tensor& exp_avg,
                                                           const torch::Tensor& exp_avg_sq) {
  std::vector<FusedAdamWEntry> entries;
  entries.reserve(params_.size());
  for (const Unit& unit : units_) {
    int64_t offset = unit.shard_offset;  // one shard: the unit's piece is the whole unit
    for (size_t i = unit.first; i < unit.end; ++i) {
      torch::Tensor& p = params_[i];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      const int64_t n = p.numel();
      entries.push_back(FusedAdamWEntry{master_shard_.detach().narrow(0, offset, n), p.grad().contiguous().view({-1}),
                                        exp_avg.narrow(0, offset, n), exp_avg_sq.narrow(0, offset, n),
                                        p.detach().view({-1})});
      offset += n;
    }
  }
  return entries;
}

bool ZeroPartition::CanStepFused() const {
  return !offload() && !offload_param() && master_shard_.is_cuda() && FusedAdamWAvailable();
}

absl::Status ZeroPartition::StepFusedAndGather(const kernels::AdamWHyperparameters& h, const torch::Tensor& exp_avg,
                                               const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  // Stage 3: no gather of the old values may still read the parameter shard.
  if (absl::Status s = Drain(); !s.ok()) return s;
  const torch::Tensor master = master_shard_.detach();
  for (const Unit& unit : units_) {
    auto piece = [&unit](const torch::Tensor& flat) { return flat.narrow(0, unit.shard_offset, unit.piece); };
    // The updated 16-bit values land where they are needed next: this rank's
    // slot of the unit's all-gather buffer, or (stage 3) the parameter shard.
    torch::Tensor all;
    torch::Tensor out;
    if (stage() == 3) {
      out = piece(param_shard_);
    } else {
      all = torch::empty({unit.piece * shards_}, params_[unit.first].options());
      out = all.narrow(0, shard_rank_ * unit.piece, unit.piece);
    }
    // One launch per unit, so at most one unit's buffer is alive (a bucket
    // of reduce_bucket_size elements; at stage 0 the one unit is the whole
    // model), as in GatherParameters.
    FusedAdamWStep({FusedAdamWEntry{piece(master), piece(shard_gradient_sum_), piece(exp_avg), piece(exp_avg_sq), out}},
                   h);
    if (stage() == 3) continue;
    if (comm_ != nullptr && shards_ > 1) {
      // In place: NCCL takes a send buffer that is the rank's own slot of
      // the receive buffer.
      if (absl::Status s = comm_->AllGather(out, all); !s.ok()) return s;
    }
    CopyIntoParameters(unit, all);
  }
  return stage() == 3 ? RegatherPersistentUnits() : absl::OkStatus();
}

absl::Status ZeroPartition::RegatherPersistentUnits() {
  for (int u = 0; u < units(); ++u) {
    if (units_[u].persistent) {
      gathered_[u] = false;  // stale: fetch the updated values
      if (absl::Status s = GatherUnit(u); !s.ok()) return s;
    } else {
      ReleaseUnit(u);
    }
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
