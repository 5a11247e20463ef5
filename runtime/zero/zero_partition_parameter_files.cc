// ZeroPartition's parameter files (Note [Parameters on NVMe] in
// zero_partition.h): a gather's read of its unit's piece, and the update
// that writes a step's new values back, unit by unit, with what a failure
// leaves behind.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {

absl::StatusOr<torch::Tensor> ZeroPartition::ReadParameterPiece(const Unit& unit) {
  const auto index = static_cast<int64_t>(&unit - units_.data());
  parameter_files_->StartRead(index, 0);
  absl::StatusOr<torch::Tensor> bytes = parameter_files_->FinishRead(0);
  if (!bytes.ok()) return bytes.status();
  return bytes->view(params_.front().scalar_type());
}

absl::Status ZeroPartition::CheckParametersCurrent() const {
  if (parameter_files_ && (update_.open || parameters_stale_)) {
    return absl::FailedPreconditionError(
        "parameters on NVMe: a failed step left the parameter files part-updated; load a checkpoint (which rewrites "
        "them whole) before the next forward, step or save");
  }
  return absl::OkStatus();
}

void ZeroPartition::AbandonParameterUpdate() {
  for (int buffer : {0, 1}) {
    if (update_.writing[buffer]) (void)parameter_files_->FinishWrite(buffer);
  }
  update_ = ParameterUpdate{};
  parameters_stale_ = true;
}

absl::Status ZeroPartition::StoreParameters(int64_t offset, const torch::Tensor& values) {
  absl::Status stored = StoreParameterRange(offset, values);
  if (!stored.ok()) AbandonParameterUpdate();
  return stored;
}

absl::Status ZeroPartition::StoreParameterRange(int64_t offset, const torch::Tensor& values) {
  ParameterUpdate& update = update_;
  if (!update.open) {
    if (offset != 0) {
      return absl::InternalError(absl::StrCat("parameters on NVMe: an update must start at element 0 of the shard, "
                                              "not ", offset));
    }
    // No gather may be reading a file (or staging buffer 0) while they change.
    if (absl::Status s = Drain(); !s.ok()) return s;
    update = ParameterUpdate{};
    update.open = true;
  }
  if (offset != update.next) {
    return absl::InternalError(absl::StrCat("parameters on NVMe: the update stored elements from ", offset,
                                            " where ", update.next, " was next (a range skipped or repeated)"));
  }
  if (offset + values.numel() > shard_size_) {
    return absl::InternalError(absl::StrCat("parameters on NVMe: elements up to ", offset + values.numel(),
                                            " of a shard of ", shard_size_));
  }
  const torch::Tensor flat = values.reshape({-1});
  int64_t done = 0;
  while (done < flat.numel()) {
    const Unit& unit = units_[update.unit];
    const int64_t within = update.next - unit.shard_offset;
    const int64_t take = std::min(flat.numel() - done, unit.piece - within);
    if (within == 0 && update.writing[update.buffer]) {
      // The buffer's previous piece must be on the drive before it refills.
      update.writing[update.buffer] = false;
      if (absl::Status s = parameter_files_->FinishWrite(update.buffer); !s.ok()) return s;
    }
    const auto index = static_cast<int64_t>(update.unit);
    parameter_files_->Staging(update.buffer, index)
        .view(params_.front().scalar_type())
        .narrow(0, within, take)
        .copy_(flat.narrow(0, done, take));
    done += take;
    update.next += take;
    if (within + take == unit.piece) {
      parameter_files_->StartWrite(index, update.buffer);
      update.writing[update.buffer] = true;
      update.buffer ^= 1;
      ++update.unit;
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroPartition::FinishParameterUpdate() {
  ParameterUpdate& update = update_;
  if (!update.open) return absl::OkStatus();
  absl::Status status;
  for (int buffer : {0, 1}) {
    if (!update.writing[buffer]) continue;
    if (absl::Status s = parameter_files_->FinishWrite(buffer); !s.ok() && status.ok()) status = s;
  }
  const int64_t next = update.next;
  const size_t unit = update.unit;
  update = ParameterUpdate{};
  parameters_stale_ = !status.ok() || next != shard_size_;
  if (!status.ok()) return status;
  if (next != shard_size_) {
    return absl::InternalError(absl::StrCat("parameters on NVMe: the update ended at element ", next, " of ",
                                            shard_size_, " (unit ", unit, "'s file would keep its old values)"));
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
