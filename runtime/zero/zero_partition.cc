#include "runtime/zero/zero_partition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/zero/tensor_storage.h"

namespace dslaunch::runtime {
namespace {

int64_t Pieces(int64_t numel, int shards) { return (numel + shards - 1) / shards; }

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
