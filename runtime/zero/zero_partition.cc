// ZeroPartition: its units and shards (creation, sizes, sharding and
// unsharding); the gradients' path is in zero_partition_gradients.cc, the
// parameters' in zero_partition_gather.cc.
#include "runtime/zero/zero_partition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/zero/tensor_storage.h"

namespace dslaunch::runtime {
namespace {

int64_t Pieces(int64_t numel, int shards) { return (numel + shards - 1) / shards; }

}  // namespace

ZeroPartition::ZeroPartition(const ZeroOptions& options, std::vector<torch::Tensor> params, Communicator* comm)
    : options_(options), params_(std::move(params)), comm_(comm) {}

absl::StatusOr<std::unique_ptr<ZeroPartition>> ZeroPartition::Create(const ZeroOptions& options,
                                                                     std::vector<torch::Tensor> params,
                                                                     Communicator* comm,
                                                                     const DeferredValues* deferred) {
  if (options.stage < 0 || options.stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("ZeroPartition: stage ", options.stage, " (0 to 3)"));
  }
  if (params.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroPartition: no ", options.frozen ? "frozen" : "trainable", " parameters"));
  }
  if (options.frozen && (options.stage != 3 || options.offload_optimizer || options.nvme || options.overlap_units ||
                         !options.norm_counts.empty())) {
    return absl::InvalidArgumentError(
        "a partition of frozen parameters is ZeRO stage 3's parameter shard alone: no optimizer, offload of it, "
        "overlapped gradients or norm");
  }
  if (options.overlap_units && (options.stage != 2 || options.units.empty())) {
    return absl::InvalidArgumentError("overlapped units need ZeRO stage 2 and the model's units");
  }
  if (options.offload_param && options.stage != 3) {
    return absl::InvalidArgumentError("offload_param needs ZeRO stage 3");
  }
  if (options.nvme_param && (options.stage != 3 || !options.offload_param)) {
    return absl::InvalidArgumentError("parameters on NVMe are ZeRO stage 3's parameter shard off the device: set stage 3 "
                                      "and offload_param");
  }
  if (options.nvme_param && options.host_step_beside_forward) {
    return absl::InvalidArgumentError(
        "parameters on NVMe with the delayed update: its host step runs while the forward reads the parameters, "
        "and both would use the parameter files (Note [Parameters on NVMe])");
  }
  if (options.nvme && !options.offload_optimizer) {
    return absl::InvalidArgumentError("NVMe offload of the optimizer goes through host memory: set offload_optimizer");
  }
  std::unique_ptr<ZeroPartition> zero(new ZeroPartition(options, std::move(params), comm));
  zero->rank_ = comm ? comm->rank() : 0;
  zero->size_ = comm ? comm->size() : 1;
  // Stage 0: one piece, the whole vector, on every rank.
  zero->shards_ = options.stage == 0 ? 1 : zero->size_;
  zero->shard_rank_ = options.stage == 0 ? 0 : zero->rank_;
  if (absl::Status built = zero->BuildUnits(); !built.ok()) return built;
  // What may fail on one rank alone (its reads, its drive) before the ranks'
  // first collective: Note [Shard-only loading] below.
  absl::Status pieces_built;
  if (options.nvme_param) {
    // Note [Parameters on NVMe]: one file per unit's piece, written below as
    // each piece is built.
    std::vector<int64_t> piece_bytes;
    for (const Unit& unit : zero->units_) {
      piece_bytes.push_back(unit.piece * zero->params_.front().element_size());
    }
    SwappedPiecesOptions files_options = *options.nvme_param;
    files_options.resident_bytes = options.nvme_param_elements_in_memory * zero->params_.front().element_size();
    auto files = SwappedPieces::Create(files_options, std::move(piece_bytes),
                                       /*pinned=*/zero->params_.front().is_cuda());
    if (files.ok()) {
      zero->parameter_files_ = std::move(*files);
    } else {
      pieces_built = files.status();
    }
  }

  torch::NoGradGuard no_grad;
  const torch::Tensor& first = zero->params_.front();
  std::vector<torch::Tensor> master_pieces, param_pieces;
  bool any_deferred = false;
  for (size_t u = 0; u < zero->units_.size() && pieces_built.ok(); ++u) {
    const Unit& unit = zero->units_[u];
    torch::Tensor all, mine;
    bool deferred_unit = false;
    if (absl::Status s = zero->UnitValues(unit, deferred, all, mine, deferred_unit); !s.ok()) {
      pieces_built = s;
      break;
    }
    any_deferred = any_deferred || deferred_unit;
    // Offloaded pieces go to the host one unit at a time: a model that fits
    // on the device only partitioned never has its fp32 copy there.
    if (!options.frozen) {
      const torch::Device master_device = options.offload_optimizer ? torch::kCPU : mine.device();
      master_pieces.push_back(mine.to(master_device, torch::kFloat, /*non_blocking=*/false, /*copy=*/true));
    }
    if (options.stage == 3) {
      if (zero->parameter_files_) {
        torch::Tensor bytes = mine.to(torch::kCPU).contiguous().view(torch::kUInt8);
        pieces_built = zero->parameter_files_->Write(static_cast<int64_t>(u), bytes);
      } else {
        const torch::Device param_device = options.offload_param ? torch::kCPU : mine.device();
        param_pieces.push_back(mine.to(param_device, mine.scalar_type(), false, /*copy=*/true));
      }
      // The module's parameters become views of the unit's flat buffer.
      int64_t offset = 0;
      for (size_t i = unit.first; i < unit.end; ++i) {
        torch::Tensor& p = zero->params_[i];
        p.set_data(all.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
      zero->full_.push_back(all);
      zero->gathered_.push_back(true);
      if (deferred_unit) {
        // Only this rank's piece is real; the gathers fill the rest when used.
        zero->peak_live_ = std::max(zero->peak_live_, zero->LiveElements());
        ResizeStorage(all, 0);
        zero->gathered_.back() = false;
      }
    }
  }
  // Note [Frozen parameters at ZeRO-3]: no master, no optimizer state.
  torch::Tensor shard;
  if (pieces_built.ok()) {
    shard = options.frozen ? torch::empty({0}) : torch::cat(master_pieces);
    master_pieces.clear();
  }
  if (pieces_built.ok() &&
      std::find(options.norm_counts.begin(), options.norm_counts.end(), false) != options.norm_counts.end()) {
    if (options.norm_counts.size() != zero->params_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("norm_counts has ", options.norm_counts.size(),
                                                     " entries for ", zero->params_.size(), " parameters"));
    }
    std::vector<torch::Tensor> weight_pieces;
    for (const Unit& unit : zero->units_) {
      std::vector<torch::Tensor> flat;
      for (size_t i = unit.first; i < unit.end; ++i) {
        flat.push_back(torch::full({zero->params_[i].numel()}, options.norm_counts[i] ? 1.0 : 0.0,
                                   shard.options().requires_grad(false)));
      }
      const int64_t padded = unit.piece * zero->shards_;
      if (padded > unit.numel) flat.push_back(torch::zeros({padded - unit.numel}, shard.options()));
      weight_pieces.push_back(torch::cat(flat).narrow(0, zero->shard_rank_ * unit.piece, unit.piece));
    }
    zero->norm_weight_ = torch::cat(weight_pieces);
  }
  if (pieces_built.ok() && options.nvme) {
    // Note [NVMe offload]: the masters go to their swap files, zero moments
    // beside them; what stays is the parameters' rounding of them.
    auto swapped = SwappedShard::Create(*options.nvme, {"master", "exp_avg", "exp_avg_sq"}, shard.numel());
    if (swapped.ok()) pieces_built = (*swapped)->WriteWhole(0, shard);
    if (!swapped.ok()) {
      pieces_built = swapped.status();
    } else if (pieces_built.ok()) {
      zero->swapped_ = std::move(*swapped);
      if (options.stage != 3) {
        zero->updated_parameters_ = shard.to(first.scalar_type());
        if (first.is_cuda()) zero->updated_parameters_ = zero->updated_parameters_.pin_memory();
      }
      shard = torch::Tensor();
    }
  } else if (pieces_built.ok() && !options.frozen) {
    // Pinned host memory makes the copies to and from the GPU asynchronous.
    if (options.offload_optimizer && first.is_cuda()) shard = shard.pin_memory();
    zero->master_shard_ = shard.requires_grad_(true);
  }
  // Note [Shard-only loading]: each rank read its own pieces, and the
  // persistent units are gathered from all of them below; a rank whose read
  // (or whose drive, for swap files) failed must not leave the others
  // waiting in that gather until the control plane stops the job. The
  // ranks agree first (a collective every rank reaches, however far it
  // got), and all of them stop.
  if (deferred != nullptr && zero->comm_ != nullptr && zero->size_ > 1) {
    torch::Tensor built = torch::full({1}, pieces_built.ok() ? 1.0 : 0.0, torch::TensorOptions().device(first.device()));
    if (absl::Status agreed = zero->comm_->AllReduce(built, ReduceOp::kMin); !agreed.ok()) {
      return pieces_built.ok() ? agreed : pieces_built;
    }
    if (pieces_built.ok() && built.item<double>() < 1) {
      return absl::AbortedError(
          "another rank of the data-parallel group could not build its ZeRO-3 pieces of the model (its own error "
          "names the file); this rank stops with it instead of waiting in the persistent units' gather");
    }
  }
  if (!pieces_built.ok()) return pieces_built;
  auto start_worker = [&] {
    if (options.worker != nullptr) {
      zero->worker_ = options.worker;
    } else {
      zero->own_worker_ = std::make_unique<CommWorker>(first.device());
      zero->worker_ = zero->own_worker_.get();
    }
  };
  if (options.overlap_units) start_worker();
  if (options.stage == 3) {
    if (!zero->parameter_files_) {
      torch::Tensor params_shard = torch::cat(param_pieces);
      param_pieces.clear();
      if (options.offload_param && first.is_cuda()) params_shard = params_shard.pin_memory();
      zero->param_shard_ = params_shard;
    }
    zero->pending_.resize(zero->units_.size());
    start_worker();
    if (any_deferred) {
      // Note [Shard-only loading]: the persistent units from every rank's
      // pieces (every rank's units are deferred alike: the same collectives).
      if (absl::Status s = zero->RegatherPersistentUnits(); !s.ok()) return s;
      zero->peak_live_ = std::max(zero->peak_live_, zero->LiveElements());
    } else {
      for (int u = 0; u < zero->units(); ++u) zero->ReleaseUnit(u);
      zero->peak_live_ = zero->LiveElements();
    }
  }
  // Note [bf16 parameters from the host step].
  // With parameters on NVMe the copy is a buffer of its own, which the
  // update stores from (a copy of bf16 values instead of a rounding pass).
  if (options.offload_optimizer && !options.nvme && first.scalar_type() == torch::kBFloat16) {
    if (options.stage == 3 && options.offload_param && !options.nvme_param && !options.host_step_beside_forward) {
      zero->host_parameter_copy_ = zero->param_shard_;
    } else {
      zero->host_parameter_copy_ = torch::empty(
          {zero->shard_size_}, torch::TensorOptions().dtype(torch::kBFloat16).pinned_memory(first.is_cuda()));
    }
  }
  return zero;
}

absl::Status ZeroPartition::BuildUnits() {
  const char* kind = options_.frozen ? "frozen" : "trainable";
  for (const auto& p : params_) total_ += p.numel();
  std::vector<ParameterUnit> spec = options_.units;
  if (options_.stage != 3 && !(options_.stage == 2 && options_.overlap_units)) {
    spec.clear();
    if (options_.stage > 0 && options_.bucket_elements > 0) {
      // Buckets of consecutive parameters up to bucket_elements each.
      int64_t elements = 0;
      for (size_t i = 0; i < params_.size(); ++i) {
        const int64_t n = params_[i].numel();
        if (spec.empty() || elements + n > options_.bucket_elements) {
          spec.push_back(ParameterUnit{static_cast<int64_t>(i), 0, /*layer=*/false});
          elements = 0;
        }
        ++spec.back().parameter_count;
        elements += n;
      }
    }
  }
  if (spec.empty()) spec = {ParameterUnit{0, static_cast<int64_t>(params_.size()), /*layer=*/false}};
  size_t next = 0;
  for (const ParameterUnit& s : spec) {
    if (s.first_parameter != static_cast<int64_t>(next) || s.parameter_count <= 0 ||
        next + s.parameter_count > params_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ZeRO-3 units must cover the ", params_.size(),
                       " ", kind, " parameters in order, each once; a unit starts at parameter ", s.first_parameter,
                       " with ", s.parameter_count, " parameters where parameter ", next, " was expected"));
    }
    Unit unit;
    unit.first = next;
    unit.end = next + s.parameter_count;
    unit.layer = s.layer;
    for (size_t i = unit.first; i < unit.end; ++i) unit.numel += params_[i].numel();
    unit.piece = Pieces(unit.numel, shards_);
    unit.shard_offset = shard_size_;
    unit.persistent = options_.stage == 3 && unit.numel < options_.persistence_threshold;
    shard_size_ += unit.piece;
    units_.push_back(unit);
    next = unit.end;
  }
  if (next != params_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO-3 units cover ", next, " of the ", params_.size(), " ", kind, " parameters"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> ZeroPartition::UnitSizes() const {
  std::vector<int64_t> sizes;
  for (const Unit& unit : units_) sizes.push_back(unit.numel);
  return sizes;
}

int64_t ZeroPartition::LiveElements() const {
  int64_t live = 0;
  for (size_t u = 0; u < full_.size(); ++u) {
    if (gathered_[u]) live += full_[u].numel();
  }
  return live;
}

int64_t ZeroPartition::StepLiveElements() const {
  int64_t always = 0, largest_layer = 0;
  for (const Unit& unit : units_) {
    const int64_t whole = unit.piece * shards_;
    if (unit.layer && !unit.persistent) {
      largest_layer = std::max(largest_layer, whole);
    } else {
      always += whole;
    }
  }
  return always + largest_layer;
}

void ZeroPartition::ZeroGradients() {
  // Dropped, not zeroed (PyTorch's zero_grad(set_to_none=True)): the next
  // backward hands its fresh gradients over instead of adding them to zeros.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  if (master_shard_.defined()) master_shard_.mutable_grad() = torch::Tensor();
  shard_gradient_ = torch::Tensor();
  grad_accumulator_ = torch::Tensor();
  shard_gradient_sum_ = torch::Tensor();
  accumulated_ = false;
}

int64_t ZeroPartition::ParameterBytes() const {
  if (stage() != 3) {
    int64_t bytes = 0;
    for (const auto& p : params_) bytes += p.numel() * p.element_size();
    return bytes;
  }
  // The parameter shard (none in memory on NVMe), plus the units that stay whole.
  int64_t bytes = param_shard_.defined() ? param_shard_.numel() * param_shard_.element_size() : 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].persistent) bytes += full_[u].numel() * full_[u].element_size();
  }
  return bytes;
}

int64_t ZeroPartition::GradientBytes() const {
  if (options_.frozen) return 0;
  if (stage() >= 2) {
    // The persistent shard accumulator, in the gradients' dtype.
    return shard_size_ * params_.front().element_size();
  }
  int64_t bytes = 0;
  for (const auto& p : params_) bytes += p.numel() * p.element_size();
  return bytes;
}

torch::Tensor ZeroPartition::ShardOf(const torch::Tensor& full_unpadded) const {
  torch::Tensor all = full_unpadded.to(torch::kFloat).reshape({-1}).narrow(0, 0, total_);
  std::vector<torch::Tensor> pieces;
  int64_t offset = 0;
  for (const Unit& unit : units_) {
    const int64_t begin = std::min(unit.numel, shard_rank_ * unit.piece);
    const int64_t take = std::min(unit.piece, unit.numel - begin);
    torch::Tensor piece = torch::zeros({unit.piece}, all.options());
    if (take > 0) piece.narrow(0, 0, take).copy_(all.narrow(0, offset + begin, take));
    pieces.push_back(piece);
    offset += unit.numel;
  }
  return torch::cat(pieces).to(swapped_ ? torch::Device(torch::kCPU) : master_shard_.device());
}

torch::Tensor ZeroPartition::Unshard(const std::vector<torch::Tensor>& pieces, const std::vector<int64_t>& unit_sizes) {
  const int world = static_cast<int>(pieces.size());
  std::vector<torch::Tensor> parts;
  int64_t offset = 0;  // of the unit's piece within each saved shard
  for (int64_t numel : unit_sizes) {
    const int64_t piece = Pieces(numel, world);
    std::vector<torch::Tensor> unit;
    for (const torch::Tensor& shard : pieces) unit.push_back(shard.reshape({-1}).narrow(0, offset, piece));
    parts.push_back(torch::cat(unit).narrow(0, 0, numel));
    offset += piece;
  }
  return torch::cat(parts);
}

}  // namespace dslaunch::runtime
