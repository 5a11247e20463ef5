// ZeroPartition's unit values at creation: the parameters' own, or (Note
// [Shard-only loading]) this rank's piece alone, filled from their source.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {

absl::Status ZeroPartition::UnitValues(const Unit& unit, const DeferredValues* deferred, torch::Tensor& all,
                                       torch::Tensor& mine, bool& deferred_unit) const {
  torch::NoGradGuard no_grad;
  const int64_t padded = unit.piece * shards_;
  size_t deferred_parameter = unit.end;
  for (size_t i = unit.first; i < unit.end && deferred_parameter == unit.end; ++i) {
    if (IsDeferredParameter(params_[i])) deferred_parameter = i;
  }
  deferred_unit = deferred_parameter != unit.end;
  if (deferred_unit && (options_.stage != 3 || deferred == nullptr || !deferred->read)) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.frozen ? "ZeroPartition: frozen" : "ZeroPartition: trainable", " parameter ", deferred_parameter,
        " is deferred (no values yet, Note [Shard-only loading]): only a ZeRO stage 3 partition given their source "
        "fills deferred parameters (this one is stage ",
        options_.stage, deferred == nullptr || !deferred->read ? ", without a source)" : ")"));
  }
  if (deferred_unit) {
    all = torch::empty({padded},
                       torch::TensorOptions().dtype(params_[unit.first].scalar_type()).device(deferred->device));
    mine = all.narrow(0, shard_rank_ * unit.piece, unit.piece);
    return FillPiece(unit, *deferred, mine);
  }
  std::vector<torch::Tensor> flat;
  for (size_t i = unit.first; i < unit.end; ++i) flat.push_back(params_[i].detach().reshape({-1}));
  all = torch::cat(flat);
  if (padded > unit.numel) all = torch::cat({all, torch::zeros({padded - unit.numel}, all.options())});
  mine = all.narrow(0, shard_rank_ * unit.piece, unit.piece);
  return absl::OkStatus();
}

absl::Status ZeroPartition::FillPiece(const Unit& unit, const DeferredValues& deferred, torch::Tensor mine) const {
  torch::NoGradGuard no_grad;
  const int64_t begin = shard_rank_ * unit.piece;
  const int64_t end = begin + unit.piece;
  int64_t offset = 0;  // of parameter i within the unit
  for (size_t i = unit.first; i < unit.end; ++i) {
    const torch::Tensor& p = params_[i];
    const int64_t from = std::max(begin, offset);
    const int64_t to = std::min(end, offset + p.numel());
    if (from < to) {
      torch::Tensor slot = mine.narrow(0, from - begin, to - from);
      if (IsDeferredParameter(p)) {
        if (absl::Status read = deferred.read(i, from - offset, slot); !read.ok()) return read;
      } else {
        slot.copy_(p.detach().reshape({-1}).narrow(0, from - offset, to - from));
      }
    }
    offset += p.numel();
  }
  if (end > std::max(begin, offset)) {
    const int64_t padding_from = std::max(begin, offset);
    mine.narrow(0, padding_from - begin, end - padding_from).zero_();
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
