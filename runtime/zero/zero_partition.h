// ZeRO stages 1, 2 and 3 (Note [ZeRO partitioning], Note [ZeRO-3 units]).
//
// All trainable parameters are viewed as one flat vector of Ψ elements cut
// into units (for stages 1-2 buckets of reduce_bucket_size elements, so no
// collective or temporary copy is larger than a bucket; the model's units for
// stage 3; one unit for stage 0). Each
// unit is padded to a multiple of the data-parallel size N and rank r owns
// piece r of every unit: [r·S_u, (r+1)·S_u) with S_u = ceil(Ψ_u / N). With
// one unit that is the contiguous range [r·S, (r+1)·S) of the whole vector.
// A rank keeps the fp32 master weights and the optimizer state of its pieces
// only (stage 1), and with stage 2 also only its pieces of the gradients:
// each micro-step's gradients are reduce-scattered into a persistent shard
// accumulator in the gradients' dtype and the full gradients are freed. After
// the optimizer step on the shard, the updated parameters are all-gathered
// back into every rank's (16-bit or fp32) model parameters.
//
// Stage 3 partitions the 16-bit parameters too: every rank keeps its pieces
// in a parameter shard, and a unit's full parameters exist only while it is
// gathered (GatherUnit ... ReleaseUnit). The module's parameters are views
// of one flat buffer per unit whose storage is released (resized to zero
// bytes) and re-allocated in place, so tensors autograd saved during forward
// see the parameters again when the unit is gathered for its backward.
// Units with fewer elements than stage3_param_persistence_threshold stay
// gathered (DeepSpeed keeps parameters below the threshold whole; here the
// threshold applies to whole units).
//
// Note [Frozen parameters at ZeRO-3]: parameters that do not train (LoRA's
// base, usually almost all of the model) are partitioned at stage 3 too, as
// DeepSpeed does: a second partition (ZeroOptions::frozen) over the frozen
// side of the same units (PartitionedModel::ParameterUnits names both
// sides) holds this rank's pieces and nothing else (no master, gradient or
// optimizer state), and Stage3Runner gathers and releases both sides of a
// unit together. It submits to the trainable partition's comm worker, so
// the gathers of both keep one order on every rank. A rank then keeps 1/N
// of the base instead of all of it (on the host with offload_param), and
// the whole base is never resident at once.
//
// Note [Parameters on NVMe] (offload_param.device: nvme, ZeroOptions::
// nvme_param): stage 3's parameter shard lives on a local drive instead of
// host memory, one swap file per unit holding this rank's piece in the
// parameters' dtype (offload/swapped_pieces.h: length and checksum checked
// at every read). Create writes each unit's piece as soon as it is built,
// so the shard is never whole in memory. A gather reads its unit's file on
// the comm worker, into a staging buffer, and uploads (all-gathers) from
// there: with the runner's prefetch (Note [ZeRO-3 prefetch]) the drive reads
// the next unit while the device computes this one. After a step the
// updated values go back to the files: whoever produces them (the NVMe
// optimizer's sub-groups through StoreUpdatedMaster, the CPU Adam's upload
// ranges, the device master, the master a checkpoint load wrote) hands them
// over in ranges that cover the shard once, in order (with the CPU Adam and
// bf16 parameters, the bf16 copy its pass writes, Note [bf16 parameters
// from the host step], so nothing is rounded twice on one thread); each
// unit's piece is assembled in one staging buffer (rounded to the
// parameters' dtype where it is not yet) and its write queued as soon as
// it is complete, while the next piece fills the other buffer. An update
// that skips or repeats elements, or fails part-way (an I/O error, a step
// stopped between sub-groups), is an error, and the files, now mixing two
// steps, are marked stale: gathers refuse them until a whole update (a
// checkpoint load) has rewritten every piece. Host memory: two staging
// buffers as large as the largest unit's piece (and the CPU Adam's bf16
// copy, 2 bytes per shard element, beside its 16), and, with
// offload_param.max_in_cpu (nvme_param_elements_in_memory), the pieces of the
// first units that fit in that many elements: those stay in host memory and
// never touch the drive (DeepSpeed reads the key and ignores it, #4221). Not with the delayed
// update, whose step runs while the forward reads the parameters.
//
// Model states per rank with mixed-precision Adam: stage 1 4Ψ + 12Ψ/N,
// stage 2 2Ψ + 14Ψ/N, stage 3 16Ψ/N (REFERENCE.md).
//
// Stage 0 with mixed precision uses the same machinery with one range (the
// whole vector on every rank, gradients all-reduced): one flat fp32 master
// that one fused Adam step updates, instead of one optimizer step per
// parameter tensor (16Ψ either way).
//
// Not thread-safe; owned by the Engine.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"
#include "runtime/offload/swapped_pieces.h"
#include "runtime/offload/swapped_shard.h"
#include "runtime/comm/comm_worker.h"
#include "runtime/zero/fused_adamw_step.h"
#include "runtime/model/parameter_units.h"

namespace dslaunch::runtime {

struct ZeroOptions {
  int stage = 1;
  // offload_optimizer.device: cpu (ZeRO-Offload): the master shard lives in
  // host memory (pinned when the parameters are on a GPU) and gradients come
  // down to it for the step.
  bool offload_optimizer = false;
  // offload_param.device: cpu (stage 3): the 16-bit parameter shard lives in
  // host memory and goes up to the device when a unit is gathered.
  bool offload_param = false;
  // offload_param.device: nvme (Note [Parameters on NVMe]; with
  // offload_param): the parameter shard lives in swap files under this.
  std::optional<SwappedPiecesOptions> nvme_param;
  // With nvme_param: parameter elements of the shard kept in host memory
  // instead (offload_param.max_in_cpu): the first units' pieces that fit.
  int64_t nvme_param_elements_in_memory = 0;
  // Stage 3: the model's units (empty: one unit) and the persistence threshold.
  std::vector<ParameterUnit> units;
  int64_t persistence_threshold = 0;
  // Stages 1-2: the vector is cut into buckets of consecutive parameters of
  // at most this many elements (a larger parameter is a bucket of its own),
  // each reduced and gathered on its own: reduce_bucket_size. 0: one bucket.
  int64_t bucket_elements = 0;
  // Stage 2 with overlap_comm and a model that names its units: the units
  // are the buckets, and each one's reduce-scatter runs on the comm worker as
  // soon as its backward is over (Stage3Runner without gathering).
  bool overlap_units = false;
  // offload_optimizer.device: nvme (Note [NVMe offload], with
  // offload_optimizer): the fp32 master shard and the optimizer's moments
  // live in swap files, streams 0-2 of swapped() (master, exp_avg,
  // exp_avg_sq). In memory stay the gradient (fp32, host) and the updated
  // parameters in their own dtype (the stage-3 parameter shard, or a host
  // copy for stages 0-2) that the gathers read.
  std::optional<SwappedShardOptions> nvme;
  // Per parameter: whether this rank's gradient norm counts it (empty: all).
  // Under tensor parallelism a replicated parameter holds the same gradient
  // on every rank of the tensor group, and only tensor rank 0 counts it, so
  // the norm summed over the group counts it once (Note [Tensor parallelism]).
  std::vector<bool> norm_counts;
  // What the summed gradients are divided by: 0 for the group's size. The
  // experts' partition (Note [Mixture of experts]) is cut over the expert-
  // data-parallel group but averages over the whole data-parallel size: its
  // sum already holds the tokens of every rank of the expert group.
  int gradient_divisor = 0;
  // The host step runs while the next forward reads the parameters (Note
  // [Delayed parameter update]): stage 3's host parameter shard then cannot
  // be what the step writes (Note [bf16 parameters from the host step]).
  bool host_step_beside_forward = false;
  // Note [Frozen parameters at ZeRO-3]: the parameters do not train (LoRA's
  // base). Stage 3 only: the partition is the parameter shard and its
  // gathers, with no master, gradients or optimizer state.
  bool frozen = false;
  // Stage 3: the comm worker of another partition over the same group, so
  // that the collectives of both keep one order on every rank; null: a
  // worker of its own. Its owner stops it (finishing the task in progress,
  // dropping the rest) before this partition's buffers go, and this
  // partition never touches it after: never Drain() it from a destructor.
  CommWorker* worker = nullptr;
};

// Note [Shard-only loading] (runtime/model/deferred_parameters.h): where the
// values of deferred parameters come from, at stage 3.
struct DeferredValues {
  // Where each unit's flat buffer is built (the engine's device).
  torch::Device device = torch::kCPU;
  // Elements [offset, offset + out.numel()) of params[parameter], flattened,
  // into `out`.
  std::function<absl::Status(size_t parameter, int64_t offset, torch::Tensor out)> read;
};

class ZeroPartition {
 public:
  // `comm` may be null (one rank: the shard is everything). Parameters that
  // are deferred (IsDeferredParameter) need stage 3 and `deferred`: each of
  // their units is built on deferred->device, only this rank's piece is
  // read, and the unit is released before the next one is built (the
  // persistent units are then gathered from every rank's pieces, a
  // collective). Only Create reads `deferred`.
  static absl::StatusOr<std::unique_ptr<ZeroPartition>> Create(const ZeroOptions& options,
                                                               std::vector<torch::Tensor> params, Communicator* comm,
                                                               const DeferredValues* deferred = nullptr);
  bool offload() const { return options_.offload_optimizer; }
  // What runs this partition's collectives in order (null where they run inline).
  CommWorker* worker() const { return worker_; }
  bool offload_param() const { return options_.offload_param; }

  int stage() const { return options_.stage; }
  int64_t total() const { return total_; }            // Ψ
  int64_t shard_size() const { return shard_size_; }  // Σ S_u: this rank's elements
  // How many pieces each unit is cut into: N for stages 1-3, 1 for stage 0.
  int shards() const { return shards_; }
  // Ψ_u of every unit, in order (what a checkpoint records to re-cut itself).
  std::vector<int64_t> UnitSizes() const;

  // The fp32 master weights of this rank's pieces, as a leaf tensor with a
  // gradient: what the optimizer steps. With NVMe offload it is undefined
  // except while staged for a checkpoint (StageSwappedState).
  torch::Tensor& master_shard() { return master_shard_; }
  // The prepared gradient of this rank's pieces (fp32), PrepareShardGradient.
  torch::Tensor shard_gradient() const { return swapped_ ? shard_gradient_ : master_shard_.grad(); }

  // Note [NVMe offload]: the swap files (null without NVMe offload).
  SwappedShard* swapped() const { return swapped_.get(); }
  // After a sub-group stepped: its new master values [offset, offset + n)
  // into the parameters the gathers read (rounded to their dtype; with
  // parameters on NVMe, into their files, in order: Note [Parameters on
  // NVMe]).
  absl::Status StoreUpdatedMaster(int64_t offset, const torch::Tensor& master);
  // Note [Parameters on NVMe]: the parameter files (null without them).
  const SwappedPieces* parameter_files() const { return parameter_files_.get(); }
  // FailedPrecondition while a failed step has left the files part-updated
  // (gathers, steps and saves refuse them until a load rewrites them).
  absl::Status CheckParametersCurrent() const;
  // For a checkpoint: the master shard read into master_shard() (Save reads
  // it), or zeros of its shape (`read` false: Load overwrites it whole);
  // Unstage drops it again, first writing it back to the swap files and into
  // the parameters when `write_back` (after Load).
  absl::Status StageSwappedMaster(bool read = true);
  absl::Status UnstageSwappedMaster(bool write_back);

  // Stage 2, every micro-step: reduce-scatter (sum) the model gradients into
  // the shard accumulator and free them. No-op for stages 1 and 3.
  absl::Status AccumulateMicroStep();
  // Note [Gradients to the host during backward]: with the optimizer on the
  // host and each unit's gradients reduced as soon as its backward is over
  // (stage 2 with overlapped units, stage 3), the micro-step before a step
  // also turns each unit's reduced piece into its fp32 mean and squared norm
  // right there, on the comm worker, and copies the mean down to pinned host
  // memory: the copy runs beside the rest of backward instead of after it.
  // PrepareShardGradient then handles only the units that had no gradient
  // in that backward. The values are those of the path without streaming;
  // the norm is summed unit by unit (fp64), so the clip coefficient can
  // differ in its last bits. The engine says before each backward whether
  // it is the last micro-step; the call does nothing where streaming does
  // not apply.
  void BeginBackward(bool last_micro_step);
  bool StreamsGradientsToHost() const;
  // Units whose mean the last boundary's backward streamed (read after the
  // step's PrepareShardGradient; for tests and the offload breakdown).
  int streamed_units() const { return streamed_unit_count_; }
  // At the boundary: the sum over ranks of this rank's pieces of the
  // gradients, in the gradients' dtype (shard_gradient_sum()). Stages 1-2
  // reduce-scatter each unit (stage 2 during the micro-steps), stage 3 drains
  // what backward submitted, stage 0 all-reduces.
  absl::Status ReduceShardGradientSum();
  const torch::Tensor& shard_gradient_sum() const { return shard_gradient_sum_; }
  // At the boundary: the averaged gradient of this rank's pieces into
  // master_shard().grad() (fp32), through ReduceShardGradientSum.
  absl::Status PrepareShardGradient();
  // Σ g² over this rank's pieces of the prepared gradient: a one-element
  // fp64 tensor where the gradient was reduced (no wait for the device).
  const torch::Tensor& LocalGradNormSquared() const { return local_norm_squared_; }
  // After the optimizer stepped the shard: stages 0-2 all-gather every rank's
  // updated pieces into the model parameters; stage 3 refreshes the 16-bit
  // parameter shard and re-gathers the persistent units (the others are
  // gathered when next used).
  //
  // Note [Step while uploading]: with the master shard on the host
  // (offload_optimizer: cpu), `step_range(offset, length)` steps each range
  // of the shard just before that range is copied up: the copy from pinned
  // memory is asynchronous, so the host steps the next range while the link
  // carries this one, and the step and the upload overlap instead of adding
  // up. The ranges cover the shard once, in order, in pieces of at most
  // kUploadRangeElements. Not with NVMe offload, whose step writes the
  // updated values itself (StoreUpdatedMaster).
  //
  // Note [bf16 parameters from the host step]: with the master shard on the
  // host and bf16 parameters (not NVMe), the CPU Adam also writes each
  // stepped range rounded to bf16 into host_parameter_copy() in its one pass
  // (the rounding is c10::BFloat16's, Note [bf16 rounding]), and a gather
  // with `step_range` sends those 2 bytes per element instead of the fp32
  // master's 4, with no conversion left to the device. With stage 3's
  // parameter shard on the host (offload_param) the copy is that shard
  // itself, so nothing is copied at all (a one-thread host conversion of
  // 1.3B elements took 0.9 s per step), except under the delayed update,
  // whose step runs while the forward reads the shard: there the copy is a
  // second host shard, and the gather makes the two trade places (the
  // forward then reads what the step wrote; the next step writes the other)
  // instead of copying 2 bytes per element across (one thread moved 1.2B
  // elements in 0.37 s per step on the H200 host). So a `step_range` (or,
  // under the delayed update, the host step it stands for) must write the
  // copy of every range it covers. A gather without `step_range` (after a checkpoint load) reads
  // the master as before.
  using StepRange = std::function<void(int64_t offset, int64_t length)>;
  static constexpr int64_t kUploadRangeElements = int64_t{1} << 24;
  absl::Status GatherParameters(const StepRange& step_range = {});
  // Undefined unless Note [bf16 parameters from the host step] applies:
  // [Σ S_u] bf16 on the host (pinned when the parameters are on a GPU).
  const torch::Tensor& host_parameter_copy() const { return host_parameter_copy_; }
  // Drops gradients (model and shard) for the next accumulation window.
  void ZeroGradients();

  // Note [In-place fused step]: with one rank at stage 0 or 1 (or 2, while
  // no gradient has been moved into the shard yet: one micro-step per step
  // and no overlap_comm), on a GPU, without offload, this rank's shard is the
  // whole vector in parameter order. The optimizer can then read each parameter's gradient where
  // autograd left it and write the parameter itself (one norm pass and one
  // fused AdamW pass over all tensors), with no flat gradient, fp32 mean or
  // gather in between. The results are those of the general path up to the
  // gradient norm's summation order (fp32 within 64K-element chunks, fp64
  // across them, against fp64 throughout), which can move the clipping
  // coefficient in its last bits.
  bool CanStepInPlace() const;

  // Note [Fused shard step]: on a GPU without offload, every other case
  // (several ranks, stage 3, accumulated or overlapped stage-2 gradients)
  // steps with the fused kernel too. It reads the reduced gradient sum in its
  // own dtype (ShardGradientSumSquares, then StepFusedAndGather with
  // grad_scale 1/N folded into the coefficient) and writes the 16-bit
  // parameters straight into the all-gather's buffer (stage 3: the parameter
  // shard), unit by unit, so no fp32 mean of the shard is ever built. With
  // several ranks the device clips on sqrt(Σ)·1/(N·S) while the host reports
  // sqrt(Σ/N²)/S: the reported norm can differ in its last bits.
  bool CanStepFused() const;
  // Σ g² over this rank's pieces of shard_gradient_sum() (the sum over ranks,
  // not yet divided by N): a one-element fp64 tensor on the device.
  torch::Tensor ShardGradientSumSquares() const;
  // One fused AdamW step of every unit's pieces with `h` (one step count for
  // all), each unit's all-gather right behind its step (stages 0-2); stage 3
  // re-gathers its persistent units as GatherParameters does.
  absl::Status StepFusedAndGather(const kernels::AdamWHyperparameters& h, const torch::Tensor& exp_avg,
                                  const torch::Tensor& exp_avg_sq);
  // Ranks the gradients are averaged over (N, or
  // ZeroOptions::gradient_divisor).
  int data_parallel_size() const { return options_.gradient_divisor > 0 ? options_.gradient_divisor : size_; }
  // One entry per parameter: its slice of the master shard and of the two
  // moments (flat tensors of the shard's size), its gradient (zeros when it
  // has none) and the parameter itself.
  std::vector<FusedAdamWEntry> InPlaceEntries(const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);

  // Stage 3 (Note [ZeRO-3 units], Note [ZeRO-3 prefetch]). Stage 3's
  // collectives run on a CommWorker in submission order: StartGather begins a
  // unit's all-gather (a prefetch) and returns at once; GatherUnit waits for
  // it (starting it first if need be).
  int units() const { return static_cast<int>(units_.size()); }
  bool unit_is_layer(int unit) const { return units_[unit].layer; }
  int64_t UnitElements(int unit) const { return units_[unit].piece * shards_; }
  absl::Status StartGather(int unit);
  absl::Status GatherUnit(int unit);
  void ReleaseUnit(int unit);  // keeps persistent units; waits for a gather in flight
  bool UnitHasGradients(int unit) const;
  // Takes the unit's gradients (the parameters' are freed at once) and
  // reduce-scatters (sum) them into this rank's accumulator: on the worker at
  // stage 3 (errors surface at Drain), inline at stage 2.
  absl::Status AccumulateUnitGradients(int unit);
  // Waits for every collective submitted; the first error, or OK.
  absl::Status Drain();
  // Elements of full (gathered) parameters alive now and at most so far.
  int64_t LiveElements() const;
  int64_t PeakLiveElements() const { return peak_live_; }
  // What a step holds whole at most: root and persistent units plus the
  // largest layer unit (one layer is gathered at a time).
  int64_t StepLiveElements() const;

  // Bytes held persistently by this rank.
  int64_t ParameterBytes() const;
  int64_t GradientBytes() const;
  int64_t MasterBytes() const { return swapped_ || !master_shard_.defined() ? 0 : master_shard_.numel() * 4; }
  // Note [bf16 parameters from the host step]: the host buffer the CPU Adam
  // writes the rounded parameters into, when it is a buffer of its own (0
  // when there is none, or when it is the parameter shard itself).
  int64_t HostParameterCopyBytes() const {
    if (!host_parameter_copy_.defined() || host_parameter_copy_.is_same(param_shard_)) return 0;
    return host_parameter_copy_.numel() * host_parameter_copy_.element_size();
  }
  int64_t ParameterElementBytes() const { return params_.front().element_size(); }

  // For checkpoints: this rank's pieces [Σ S_u] of a flat vector of Ψ
  // elements (fp32) in parameter order, padded with zeros: how a checkpoint
  // written at another world size or stage is re-cut.
  torch::Tensor ShardOf(const torch::Tensor& full_unpadded) const;
  // The inverse over all ranks: the flat Ψ vector from every saved rank's
  // pieces, for units of `unit_sizes` cut into pieces.size() parts.
  static torch::Tensor Unshard(const std::vector<torch::Tensor>& pieces, const std::vector<int64_t>& unit_sizes);

 private:
  struct Unit {
    size_t first = 0, end = 0;  // parameter indices [first, end)
    int64_t numel = 0;          // Ψ_u
    int64_t piece = 0;          // S_u
    int64_t shard_offset = 0;   // where this rank's piece starts in the shard
    bool layer = false;
    bool persistent = false;  // stage 3: never released
  };

  ZeroPartition(const ZeroOptions& options, std::vector<torch::Tensor> params, Communicator* comm);
  absl::Status BuildUnits();
  // Unit `unit`'s values flat and padded to its pieces (`all`) and this
  // rank's piece of them (`mine`, a view of `all`): the parameters' values,
  // or, when a parameter is deferred (Note [Shard-only loading]), a buffer
  // whose piece alone is filled from `deferred` (`deferred_unit` says which).
  absl::Status UnitValues(const Unit& unit, const DeferredValues* deferred, torch::Tensor& all, torch::Tensor& mine,
                          bool& deferred_unit) const;
  // Note [Shard-only loading]: this rank's piece of `unit` into `mine`, each
  // deferred parameter's part read from `deferred`, the others copied.
  absl::Status FillPiece(const Unit& unit, const DeferredValues& deferred, torch::Tensor mine) const;
  // The unit's model gradients flattened into its padded layout (zeros where
  // a parameter has no gradient).
  torch::Tensor FlatGradients(const Unit& unit) const;
  // Reduce-scatter (or copy on one rank) of a unit's padded flat vector.
  absl::Status ScatterInto(torch::Tensor flat, int64_t piece, torch::Tensor mine);
  void AddToAccumulator(const Unit& unit, const torch::Tensor& mine);
  // Elements [shard_offset, shard_offset + sum.numel()) of the prepared
  // gradient: `sum` (a piece of the reduced sum) divided by N into `mean`
  // (fp32), 16M elements at a time; returns the piece's Σ g² ([1] fp64,
  // weighted by norm_weight_) where `sum` is. `asynchronous`: the copy into
  // `mean` does not wait (pinned memory, the caller's stream orders it).
  torch::Tensor MeanInto(const torch::Tensor& sum, int64_t shard_offset, torch::Tensor& mean,
                         bool asynchronous) const;
  // A unit's gathered flat values [N·S_u] into its model parameters.
  void CopyIntoParameters(const Unit& unit, const torch::Tensor& all);
  // Stage 3 after a step: persistent units gathered again, the others released.
  absl::Status RegatherPersistentUnits();
  // Note [Parameters on NVMe]: this rank's piece of `unit`, read from its
  // file into staging buffer 0 (on the worker; valid until the next read).
  absl::StatusOr<torch::Tensor> ReadParameterPiece(const Unit& unit);
  // Elements [offset, offset + values.numel()) of the updated shard into the
  // files: the next range of an update that covers the shard in order (the
  // first range, at 0, waits for the worker's gathers to end).
  absl::Status StoreParameters(int64_t offset, const torch::Tensor& values);
  // Ends the update: every unit's write is done (nothing when none began).
  absl::Status FinishParameterUpdate();
  // After an error: waits for the writes in flight, closes the update, and
  // marks the files stale (gathers refuse them until a whole update).
  void AbandonParameterUpdate();
  absl::Status StoreParameterRange(int64_t offset, const torch::Tensor& values);

  const ZeroOptions options_;
  std::vector<torch::Tensor> params_;
  Communicator* const comm_;
  int rank_ = 0;
  int size_ = 1;        // data-parallel ranks (gradients are averaged over them)
  int shards_ = 1;      // pieces each unit is cut into
  int shard_rank_ = 0;  // which piece this rank owns
  int64_t total_ = 0;
  int64_t shard_size_ = 0;
  std::vector<Unit> units_;
  torch::Tensor master_shard_;
  // NVMe offload: the swap files, the prepared gradient, and (stages 0-2)
  // the updated parameters in their dtype on the host, for the gathers.
  std::unique_ptr<SwappedShard> swapped_;
  torch::Tensor shard_gradient_;
  torch::Tensor updated_parameters_;
  torch::Tensor grad_accumulator_;    // stages 2-3: [Σ S_u] in the gradients' dtype
  bool accumulated_ = false;          // something is in the accumulator
  torch::Tensor local_norm_squared_;  // of the prepared shard gradient, [1] fp64
  // [Σ S_u] fp32: 1 where the norm counts the element, 0 where not; undefined
  // when it counts every one (ZeroOptions::norm_counts).
  torch::Tensor norm_weight_;
  torch::Tensor shard_gradient_sum_;  // [Σ S_u] in the gradients' dtype, at the boundary
  torch::Tensor host_parameter_copy_;  // Note [bf16 parameters from the host step]
  // Note [Gradients to the host during backward]: set by BeginBackward on
  // the training thread before the backward whose units the worker streams;
  // the worker fills the mean, the per-unit norms and the flags, read after
  // Drain.
  bool streaming_ = false;
  torch::Tensor streamed_mean_;          // [Σ S_u] fp32, host
  torch::Tensor streamed_norms_;         // [units] fp64, device
  std::vector<char> streamed_units_;     // per unit: its piece is in streamed_mean_
  int streamed_unit_count_ = 0;
  // Stage 3.
  torch::Tensor param_shard_;        // [Σ S_u] in the parameters' dtype (undefined on NVMe)
  // Note [Parameters on NVMe]: the files, and the update in progress.
  std::unique_ptr<SwappedPieces> parameter_files_;
  struct ParameterUpdate {
    bool open = false;
    int64_t next = 0;  // the shard offset the next range must start at
    size_t unit = 0;   // the unit being assembled
    int buffer = 0;    // its staging buffer
    bool writing[2] = {false, false};
  } update_;
  bool parameters_stale_ = false;  // an update failed part-way: the files mix two steps
  std::vector<torch::Tensor> full_;  // per unit: [N·S_u], storage released when not gathered
  std::vector<bool> gathered_;       // storage allocated (the gather may still run)
  std::vector<std::optional<CommTicket>> pending_;  // gathers in flight
  int64_t peak_live_ = 0;
  // Stage 3, and stage 2 with overlapped units: the worker, owned or
  // ZeroOptions::worker.
  std::unique_ptr<CommWorker> own_worker_;
  CommWorker* worker_ = nullptr;
};

}  // namespace dslaunch::runtime
