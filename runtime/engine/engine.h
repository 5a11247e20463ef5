// The training engine: the C++ counterpart of `deepspeed.initialize`.
//
//   auto engine = Engine::Create(model, config.ds, parallel_state, device);
//   for each micro-batch:
//     torch::Tensor loss = model->Loss(inputs, targets);   // forward: the user's module
//     engine->Backward(loss);
//     engine->Step();            // optimizer steps only at the accumulation boundary
//   EngineCheckpointer(*engine).Save(dir, tag, client_state);   // runtime/checkpoint
//
// Semantics follow DeepSpeed (REFERENCE.md, "Runtime semantics to match"):
// Backward scales the loss by 1/gradient_accumulation_steps (and by the loss
// scale with fp16); Step is a no-op except at the boundary
// ((micro_steps + 1) % gas == 0), where gradients are all-reduced over the
// data-parallel group in buckets of reduce_bucket_size elements and averaged,
// an fp16 overflow skips the optimizer step (skipped_steps += 1; the LR
// schedule does not advance; global_steps still does), the gradient norm is
// clipped, and the optimizer steps with the scheduled lr.
//
// Mixed precision (Note [Mixed precision]): with fp16 or bf16 enabled the
// module's parameters are cast to 16 bits and the engine keeps fp32 master
// copies that the optimizer updates; 16-bit gradients are copied up and the
// updated masters copied down after every step. With fp32 the optimizer
// steps the module's own parameters.
//
// ZeRO stages 1 and 2 partition the fp32 master weights and optimizer state
// (and with stage 2 the gradients) over the data-parallel group; stage 3 the
// 16-bit parameters too, gathered unit by unit for forward and backward
// (runtime/zero/zero_partition.h, stage3_runner.h). The results match stage
// 0 up to the order of floating-point sums.
//
// Not thread-safe.
#pragma once

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/schedule/loss_scaler.h"
#include "runtime/schedule/lr_schedule.h"
#include "runtime/torch_compat.h"
#include "runtime/zero/shard_adam.h"
#include "runtime/zero/stage3_runner.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {

// What the caller keeps in a checkpoint beside the engine's own state (the
// sampler's position, ...).
using ClientState = std::map<std::string, int64_t>;

struct StepResult {
  bool boundary = false;     // this Step() ended an accumulation window
  bool stepped = false;      // the optimizer stepped (false on fp16 overflow)
  double grad_norm = 0;      // before clipping, unscaled (0 when not a boundary)
  double clipped_norm = 0;   // the norm of the gradient the optimizer used
  double lr = 0;             // used for this step
  double loss_scale = 1;     // in effect for this window
  // Note [Non-finite guard]: with fp32/bf16 a non-finite loss or gradient
  // norm skips the step (stepped = false); fp16's loss scaler treats it as an
  // overflow instead.
  bool nonfinite = false;
};

// What a pipeline stage (runtime/pipeline) tells its engine. The module
// holds only the stage's layers (the rest released, frozen and empty); a
// parameter tied across stages (a GPT's embedding, also its head) is held by
// each stage that uses it, and its gradient is summed across them by the
// pipeline before the step. The engine then counts it in the gradient norm
// on the owner's stage only, reduces gradients once per step (not per
// micro-batch: the pipeline interleaves micro-batches), and sums the norm
// over the model-parallel group (every stage and tensor slice).
struct PipelineStageRole {
  std::set<std::string> tied_copies;  // parameter names this stage holds as a copy
};

class Engine {
 public:
  // Written into a ZeRO-3 checkpoint's folder with
  // stage3_gather_16bit_weights_on_model_save: every parameter, whole.
  static constexpr char kGatheredWeightsFile[] = "model_weights.safetensors";

  // `parallel` holds this rank's process groups (runtime/parallel); the
  // engine reduces gradients over its data-parallel group (ZeRO shards
  // within it). With a tensor-parallel group the model is a family split over
  // it (Note [Tensor parallelism]) and the gradient norm (clipping, fp16
  // overflow, the non-finite guard) is summed over the group, each
  // replicated parameter counted once. With a pipeline group the module is
  // one stage and `stage` says so (PipelineStageRole); runtime/pipeline
  // creates it. With an expert-parallel group (Note [Mixture of experts]) the
  // experts' parameters (IsExpertParameter) form a partition of their own,
  // cut over the expert-data-parallel group and averaged over the whole
  // data-parallel size; ZeRO stages 0-2.
  //
  // Note [Shard-only loading]: a model built with deferred parameters
  // (runtime/model/deferred_parameters.h) needs ZeRO stage 3 and `deferred`,
  // which the partitions read this rank's pieces from (used only during
  // Create).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<torch::nn::Module> model,
                                                        const DsConfig& config,
                                                        std::shared_ptr<const ParallelState> parallel,
                                                        torch::Device device,
                                                        std::optional<PipelineStageRole> stage = std::nullopt,
                                                        const ParameterSource* deferred = nullptr);

  ~Engine();

  torch::nn::Module& module() { return *model_; }
  torch::Device device() const { return device_; }
  // The dtype the module computes in: float, half or bfloat16.
  torch::ScalarType compute_dtype() const { return compute_dtype_; }

  absl::Status Backward(const torch::Tensor& loss);
  // The gradient Backward gives the loss: 1/gradient_accumulation_steps,
  // times the fp16 loss scale.
  double loss_gradient_factor() const {
    return (scaler_ ? scaler_->scale() : 1.0) / static_cast<double>(config_.gradient_accumulation_steps);
  }
  // A pipeline stage that does not end in the loss: backpropagates
  // `gradient` (already scaled, as the next stage's input gradient is) from
  // `output`, its output for one micro-batch.
  absl::Status BackwardFrom(const torch::Tensor& output, const torch::Tensor& gradient);
  bool pipelined() const { return stage_.has_value(); }
  absl::StatusOr<StepResult> Step();

  bool IsGradientAccumulationBoundary() const;
  int64_t global_steps() const { return global_steps_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // Steps skipped by the non-finite guard (fp32/bf16), in all.
  int64_t nonfinite_steps() const { return nonfinite_steps_; }
  int64_t gradient_accumulation_steps() const { return config_.gradient_accumulation_steps; }
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  double CurrentLr() const;
  const DsConfig& config() const { return config_; }
  // The data-parallel group; null with one data-parallel rank.
  Communicator* data_parallel() const { return data_parallel_; }
  const ParallelState& parallel() const { return *parallel_; }

  // Bytes of parameters, gradients, master weights and optimizer state on this
  // rank (memory_breakdown).
  struct MemoryBreakdown {
    int64_t parameters = 0, gradients = 0, master_weights = 0, optimizer_state = 0;
    // Parameters that do not train (a LoRA base), in the compute dtype, with
    // no gradient, master weight or optimizer state: whole on every rank, or
    // at stage 3 this rank's shard (plus persistent units; on the host with
    // offload_param, Note [Frozen parameters at ZeRO-3]).
    int64_t frozen_parameters = 0;
    // Master weights and optimizer state live in host memory (ZeRO-Offload).
    bool optimizer_on_host = false;
    bool parameters_on_host = false;  // ZeRO-3 offload_param: the parameter shard
    // ZeRO-3: the most parameter elements gathered at once so far.
    int64_t gathered_peak_elements = 0;
    // Units (stage 3) or buckets (stages 1-2) the ZeRO vector is cut into;
    // each is padded to a multiple of the data-parallel size.
    int partition_units = 0;
    // Expert parallelism: the experts' share of master_weights and
    // optimizer_state (cut over the expert-data-parallel group).
    int64_t expert_master_weights = 0, expert_optimizer_state = 0;
    // NVMe offload (Note [NVMe offload]): master weights and optimizer state
    // in swap files (bytes on disk; master_weights and optimizer_state are 0),
    // the host buffers they stream through, and the updated parameters kept
    // on the host for the gathers (stages 0-2). Without NVMe,
    // host_parameter_copy is the bf16 buffer the CPU Adam writes the rounded
    // parameters into when it is not the parameter shard itself (Note [bf16
    // parameters from the host step]: stages 1-2, stage 3's second shard
    // under delay_update, and stage 3 with the parameters on NVMe, Note
    // [Parameters on NVMe]), 2 bytes per shard element.
    int64_t swapped_to_nvme = 0, swap_buffers = 0, host_parameter_copy = 0;
    // Note [Parameters on NVMe]: the parameter shards' files (trainable,
    // frozen and experts'; bytes on disk), their host staging buffers, and
    // the pieces kept in host memory instead (offload_param.max_in_cpu).
    int64_t parameters_on_nvme = 0, parameter_staging = 0, parameters_in_host_memory = 0;
  };
  MemoryBreakdown Memory() const;
  // With NVMe offload, where the swap files are and how they are read and
  // written (SwappedShard::Describe, and SwappedPieces::Describe for the
  // parameters, Note [Parameters on NVMe]); empty otherwise.
  std::string NvmeOffloadDescription() const;

  // Note [Offload breakdown]: with offload_optimizer and wall_clock_breakdown,
  // the seconds of the offloaded steps so far, by part: the gradient shard to
  // the host (reduce, norm, copy down), the global norm and clip decision
  // (summed over the group, read on the host), the host step (the CPU Adam,
  // through the swap files with NVMe), and the updated parameters back to
  // the device (copy up and gather, waited for) beyond what hides behind the
  // host step (Note [Step while uploading]); and the bytes the host step
  // moved (28 per element: read master, gradient and moments, write master
  // and moments). Measured with a device wait at each boundary, so only when
  // asked for; zero otherwise.
  // With delay_update (Note [Delayed parameter update]) the host step runs
  // beside the next forward and backward; `host_step_wait` is the part of it
  // the training thread still waited for.
  struct OffloadSeconds {
    double gradients_to_host = 0, norm_and_clip = 0, host_step = 0, parameters_to_device = 0;
    double host_step_wait = 0;
    int64_t host_step_bytes = 0;
  };
  const OffloadSeconds& offload_seconds() const { return offload_seconds_; }

  // ZeRO-3 keeps only this rank's pieces of the parameters between uses.
  // Makes every parameter of the module whole (a collective: every rank calls
  // it), e.g. before reading or exporting them; the next step releases them
  // again. A no-op for stages 0-2.
  // `frozen_too` false: the trainable parameters only (Note [Frozen
  // parameters at ZeRO-3]: the frozen base stays partitioned).
  absl::Status GatherFullParameters(bool frozen_too = true);

  // Note [Delayed parameter update]
  // ZeRO-Offload's one-step-delayed parameter update (the paper's DPU;
  // zero_optimization.offload_optimizer.delay_update): Step() hands step N's
  // host Adam to a thread and returns at once, so it runs while the GPU does
  // step N+1's forward and backward; step N+1's Step() moves its gradients
  // to the host (a second pinned buffer, 4 bytes per shard element: the
  // thread still reads step N's), waits for the thread, uploads step N's
  // parameters and hands step N+1 on. The forward of step N+2 thus runs on
  // the parameters of step N: each gradient is computed one update late
  // (step k's on the parameters after k-2 updates). Each uploaded range is
  // stepped again only once its copy up has landed (a device event per
  // range), so the next host step starts while the rest still goes up.
  // Applying the pending update early would change the run, so only what
  // must see current parameters does: a checkpoint (save, load, export),
  // GatherFullParameters, and the engine's end. An evaluation between steps
  // sees what the forward sees. A run that saves a checkpoint at step N goes
  // on from the parameters of step N, exactly as a run resumed from it does.
  // With delay_update_warmup_steps = W, steps 0..W-1 update at once (the
  // paper's warm-up) and the delay starts at step W, whose own gradient is
  // still taken on current parameters.
  // ZeRO 1-3 with offload_optimizer.device=cpu; not with NVMe, experts or a
  // pipeline (refused). No-op without a pending step.
  absl::Status ApplyPendingUpdate();
  // Note [Swap path probe] with NVMe offload: up to `max_bytes` (no more
  // than the swap files hold) written and read back through this rank's
  // swap settings, and what a step's swap traffic costs at that speed
  // (DescribeSwapCost): one line per nvme_path (the optimizer's and the
  // parameters' may differ; parameters are read at every gather, counted as
  // twice per micro-step, and written once). Empty without NVMe offload.
  absl::StatusOr<std::vector<std::string>> ProbeNvmePath(int64_t max_bytes) const;
  // Ok when every trainable parameter, master weight and optimizer moment of
  // this rank is finite; otherwise FailedPrecondition naming the first that is
  // not, prefixed by `what`. Not a collective.
  absl::Status CheckFinite(const std::string& what) const;

 private:
  Engine(std::shared_ptr<torch::nn::Module> model, const DsConfig& config,
         std::shared_ptr<const ParallelState> parallel, torch::Device device, std::optional<PipelineStageRole> stage);
  absl::Status Initialize(const ParameterSource* deferred);
  absl::Status AllReduceGradients();
  // The frame of every boundary step (Step's own and the variants below):
  // `body` runs without autograd on the result so far; a LibTorch error
  // becomes InternalError naming `what`; a step that ended (stepped or
  // skipped) moves the step counters.
  absl::StatusOr<StepResult> BoundaryStep(const char* what, StepResult result,
                                          const std::function<absl::Status(StepResult&)>& body);
  // Without a ZeRO partition: gradients all-reduced, LibTorch's optimizer.
  absl::StatusOr<StepResult> AllReduceStep(StepResult result);
  // The boundary step with ZeRO stages 1-2.
  absl::StatusOr<StepResult> ZeroStep(StepResult result);
  // The boundary step with expert parallelism: both partitions, one norm.
  absl::StatusOr<StepResult> ExpertParallelStep(StepResult result);
  // Note [In-place fused step] (zero_partition.h): one rank, stages 0-1, GPU.
  absl::StatusOr<StepResult> InPlaceZeroStep(StepResult result);
  absl::StatusOr<StepResult> FusedZeroStep(StepResult result);
  // Sum of squares of the master gradients in fp64, over the tensor group
  // (each parameter once); inf/nan propagate.
  absl::StatusOr<double> GradNormSquared();
  // Tensor and pipeline parallelism: which parameters this rank's norm
  // counts (norm_counts_).
  absl::Status DecideNormCounts();
  // All-reduces a squared norm over the model-parallel group (tensor slices
  // and pipeline stages of this replica), if any.
  absl::Status SumOverModelParallelGroup(torch::Tensor& norm_squared);
  // Note [Non-finite guard]: how many of this window's micro-batch losses
  // were not finite, as a device scalar (no host wait), summed over the
  // data-parallel group when `over_group`; the count restarts.
  absl::StatusOr<torch::Tensor> TakeNonFiniteLosses(bool over_group);
  // `norm_squared` (a device tensor) becomes NaN when `nonfinite_losses` > 0.
  static void PoisonNorm(torch::Tensor& norm_squared, const torch::Tensor& nonfinite_losses);
  // After a step the kernel may have skipped (Note [Clip on the device]): the
  // counters, from the norm read afterwards.
  void CountDeviceDecidedStep(double norm_squared, StepResult* result);
  // Every rank of the job says whether it failed; how many did (a collective
  // over the world).
  absl::StatusOr<int> CountFailedRanks(bool failed);
  void ApplyLrAndMomentum(double lr);
  // The Adam betas for the next step (a cycle schedule moves them).
  std::pair<double, double> ScheduledBetas() const;
  // The boundary's shared arithmetic: from the global squared gradient norm
  // (loss-scaled), updates the loss scaler, fills result->grad_norm and
  // returns the factor that unscales and clips in one multiply, or nullopt
  // when the step must be skipped (fp16 overflow).
  std::optional<double> UnscaleAndClip(double norm_squared, StepResult* result);

  std::shared_ptr<torch::nn::Module> model_;
  const DsConfig config_;
  const std::shared_ptr<const ParallelState> parallel_;
  Communicator* const data_parallel_;  // parallel_->data()
  const torch::Device device_;
  const std::optional<PipelineStageRole> stage_;
  torch::ScalarType compute_dtype_ = torch::kFloat;

  std::vector<torch::Tensor> model_params_;   // the module's parameters
  std::vector<torch::Tensor> master_params_;  // fp32 copies (== model_params_ with fp32)
  // Per entry of model_params_: whether this rank's gradient norm counts it
  // (Note [Tensor parallelism]: a replicated parameter only on tensor rank
  // 0; a tied copy only on its owner's stage). Empty without model
  // parallelism.
  std::vector<bool> norm_counts_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;        // fp16 only
  // Note [Frozen parameters at ZeRO-3]: the parameters that do not train
  // (LoRA's base), partitioned at stage 3 beside zero_ and gathered with the
  // same units. Declared before zero_, whose comm worker it borrows: zero_
  // (and its worker) goes first.
  std::vector<torch::Tensor> frozen_params_;
  std::unique_ptr<ZeroPartition> frozen_zero_;
  // ZeRO stages 1-2 (Note [ZeRO partitioning]): the shard replaces
  // master_params_ and the shard optimizer replaces optimizer_.
  std::unique_ptr<ZeroPartition> zero_;
  std::unique_ptr<ShardAdam> shard_adam_;
  // ZeRO-3 (Note [ZeRO-3 units]): installed into the model as its UnitRunner.
  std::unique_ptr<Stage3Runner> stage3_;
  // Expert parallelism (Note [Mixture of experts]): the experts' parameters
  // (not in model_params_), their partition over the expert-data-parallel
  // group and its optimizer.
  std::vector<std::string> expert_names_;
  std::vector<torch::Tensor> expert_params_;
  std::unique_ptr<ZeroPartition> expert_zero_;  // null when no expert trains (LoRA on attention only)
  std::unique_ptr<ShardAdam> expert_adam_;
  // This rank holds only its experts (an expert group, and a model with
  // experts, trainable or frozen): an export gathers them from the group.
  bool experts_split_ = false;

  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t successful_steps_ = 0;  // what the LR schedule counts
  int64_t nonfinite_steps_ = 0;
  torch::Tensor nonfinite_losses_;  // this window's, on the device
  OffloadSeconds offload_seconds_;

  // Note [Delayed parameter update]: the host step in flight, if any, with
  // the ranges it steps in order, each after its device event.
  struct HostStepRange {
    int64_t offset = 0, length = 0;
    compat::StreamPoint uploaded;  // this range's copy up (of the previous step) has landed
  };
  // Waits for the host step in flight (its time to `waited`, its own to
  // `stepped_seconds`) and uploads its parameters, listing the uploaded
  // ranges with their events in `uploaded`; each pointer may be null.
  absl::Status FinishHostStep(std::vector<HostStepRange>* uploaded, double* waited, double* stepped_seconds);
  void StartHostStep(std::vector<HostStepRange> ranges, const torch::Tensor& gradient, double lr, double beta1,
                     double beta2, double grad_scale);
  bool delay_update_ = false;
  // Declared last: destroyed (after ~Engine waited for it) before what it uses.
  std::future<std::pair<absl::Status, double>> host_step_;  // (status, seconds it stepped)

  // Checkpoints (runtime/checkpoint/engine_checkpointer.h) save and restore
  // all of the state above; the engine itself knows nothing of files.
  friend class EngineCheckpointer;
};

}  // namespace dslaunch::runtime
