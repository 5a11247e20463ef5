// One pipeline stage's training engine: the counterpart of DeepSpeed's
// PipelineEngine.train_batch().
//
//   auto pipe = PipelineEngine::Create(model, config.ds, parallel, device);
//   for each step:
//     auto result = pipe->TrainBatch(micro_batches);   // M = gradient_accumulation_steps
//     result->loss                                      // the same on every stage
//
// Note [Pipeline stages]
// Every rank builds the whole model family from the same seed (or the same
// Hugging Face folder), then Create cuts its layer list (Layers()) into
// stages·virtual_stages contiguous runs (pipeline.partition_method),
// keeps the runs of this rank's stage (virtual stage chunk·S + stage for
// each chunk) and releases every other parameter (frozen, emptied), so the
// device holds the stage only. A parameter tied across stages (a GPT's
// token embedding, also its head) is kept on each stage that uses it: the
// owner (its first layer's stage) sends it to the others at start, and each
// step their gradients are summed across the tie before the engine steps.
// The engine (runtime/engine) then steps the stage's parameters as usual,
// with ZeRO-1/2 over the data-parallel group and the gradient norm summed
// over the stages (PipelineStageRole).
//
// TrainBatch runs the stage's instruction stream (Note [Pipeline
// schedules]): forward passes through ForwardLayers, received activations
// as leaves whose gradient goes back, the last stage's losses through
// Engine::Backward (scaled by 1/M), the others through BackwardFrom; an
// output is dropped once its backward ran, an input once its gradient is
// sent. The loss is averaged on the last stage and broadcast.
//
// With pipeline.activation_checkpoint_interval N (DeepSpeed's
// PipelineModule knob), every N consecutive decoder layers of a stage's
// run form one segment recomputed in backward (only its input is kept, as
// the model's RecomputeStorage says: cpu_checkpointing,
// partition_activations); the embedding and the head run as they are.
//
// Note [Experts in pipeline stages]
// A mixture-of-experts model (Note [Mixture of experts]) adds its layers'
// weighted auxiliary losses to the training loss, their gradient reaching
// each layer through the scale its loss received in backward (Note in
// runtime/moe/auxiliary_loss.h). Across stages: the loss a stage computes
// (the head's, ForwardLayers) records no scale, so every stage sets it,
// before each backward, to what the engine gives the loss (Engine::loss_gradient_factor: 1/M times
// the fp16 loss scale, the same on every stage); each stage tallies its
// layers' auxiliary losses over the forwards of the step (TakeAuxiliaryLoss,
// a recomputation's dropped), and the step's loss is the sum over the
// stages of the last stage's losses and every stage's auxiliary losses (an
// all-reduce where a broadcast from the last stage was), so every rank
// reports what one process reports. Expert parallelism with stages is
// refused (Engine::Create).
//
// Not thread-safe; every rank of the job calls TrainBatch the same number
// of times.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/engine/engine.h"
#include "runtime/model/model_interface.h"
#include "runtime/pipeline/pipeline_schedule.h"

namespace dslaunch::runtime {

// One instruction of one step, for the timeline (--pipeline_timeline).
struct PipelineEvent {
  std::string name;  // DescribeInstruction
  double start_us = 0, duration_us = 0;
};

struct PipelineBatchResult {
  double loss = 0;  // mean over the micro-batches, the same on every stage
  StepResult step;  // the engine's boundary step
  // This stage's wall clock for the schedule (wall_clock_breakdown).
  double forward_seconds = 0, backward_seconds = 0, transfer_seconds = 0, schedule_seconds = 0;
  double step_seconds = 0;  // tied gradients, then the optimizer
  // activation_checkpoint_interval: segments this stage recomputed in backward.
  int recomputed_segments = 0;
  // Note [Outputs released once sent]: bytes of this stage's outputs whose
  // memory went as soon as the next stage had them.
  int64_t released_output_bytes = 0;
  std::vector<PipelineEvent> timeline;
};

// Note [Measured bubble]
// A stage's bubble is its share of the pipeline's step spent outside its
// forward and backward passes. The step is the longest stage's schedule
// (the first stage's: it runs the first forward at once and the last
// backward at the end), not the stage's own: the last stage's schedule ends
// with its last backward, while the step goes on until that gradient has
// gone back through every stage, so its own window would leave out its
// idle end ((S-1-s)·backward of stage s). Against the step, every stage of
// a balanced 1F1B idles (S-1)(forward+backward): the schedule's
// (S-1)/(v·M+S-1). `busy` and `window`: each stage's forward+backward
// seconds and schedule seconds (PipelineBatchResult), over the same steps.
// On a GPU the host clock would time the launches, not the kernels: with
// wall_clock_breakdown each instruction waits for the device before its
// time is read (DeepSpeed's synchronized timers), which costs the overlap
// of one instruction's launches with the previous one's kernels.
std::vector<double> StageBubbleFractions(const std::vector<double>& busy, const std::vector<double>& window);

class PipelineEngine {
 public:
  // `model` implements ModelInterface. config.pipeline gives the schedule,
  // virtual stages and partition; config.gradient_accumulation_steps the
  // micro-batches per step. Errors name the key.
  static absl::StatusOr<std::unique_ptr<PipelineEngine>> Create(std::shared_ptr<torch::nn::Module> model,
                                                                const DsConfig& config,
                                                                std::shared_ptr<const ParallelState> parallel,
                                                                torch::Device device);

  // One optimizer step over exactly gradient_accumulation_steps micro-batches
  // (every stage passes the same ones; each reads what it needs). Errors
  // name the stage, the instruction and the micro-batch.
  absl::StatusOr<PipelineBatchResult> TrainBatch(const std::vector<TokenBatch>& micro_batches);

  // The mean loss over `micro_batches` without training (evaluation): each
  // micro-batch's forward runs through the stages in turn; the result is
  // the same on every stage. Call it under torch::NoGradGuard.
  absl::StatusOr<double> EvalBatch(const std::vector<TokenBatch>& micro_batches);

  // Collectives over the pipeline group (every stage calls them):
  // `values` of every stage, in stage order, on every stage (the same length
  // on each).
  absl::StatusOr<std::vector<std::vector<double>>> GatherOverStages(const std::vector<double>& values);
  // Every stage's timeline on stage 0 (the others get an empty list).
  absl::StatusOr<std::vector<std::vector<PipelineEvent>>> GatherTimelines(const std::vector<PipelineEvent>& mine);

  // Tests: the next TrainBatch raises inside `micro_batch`'s first forward
  // pass on this stage (dsrank --raise_at_step).
  void FailForwardForTesting(int micro_batch) { fail_forward_ = micro_batch; }
  // Tests: the next TrainBatch announces `micro_batch`'s activation with one
  // more time step than it sends, as a stage built for other batch shapes
  // would (dsrank --shape_fault_at_step): the next stage's handshake check.
  void MisstateShapeForTesting(int micro_batch) { misstate_shape_ = micro_batch; }

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  int stage() const { return stage_; }
  int stages() const { return shape_.stages; }
  const PipelineShape& shape() const { return shape_; }
  PipelineScheduleKind schedule() const { return kind_; }
  // Virtual stage v holds layers [boundaries[v], boundaries[v + 1]) of Layers().
  const std::vector<int>& boundaries() const { return boundaries_; }
  // One line per virtual stage: its layers and parameter count.
  const std::vector<std::string>& partition_lines() const { return partition_lines_; }
  // Parameter names this stage holds (its layers' and its tied copies).
  const std::set<std::string>& held_parameters() const { return held_; }

 private:
  struct TiedSet {
    std::string name;
    torch::Tensor parameter;  // this stage's copy
    std::vector<int> stages;  // every stage that holds it, ascending
  };
  // One (micro-batch, chunk) pass's tensors while it is in flight.
  struct PassState {
    torch::Tensor input;     // the received activation (a leaf that requires grad)
    torch::Tensor output;    // the forward's output (the loss on the last virtual stage)
    torch::Tensor gradient;  // the received gradient of `output`
  };

  PipelineEngine() = default;
  absl::Status Cut(ModelInterface& family, torch::nn::Module& module, const PipelineConfig& pipeline);
  absl::Status ShareTiedParameters();
  absl::Status ReduceTiedGradients();
  absl::Status Exchange(const PipeInstruction& instruction, const std::vector<TokenBatch>& batches,
                        std::map<std::pair<int, int>, PassState>& passes);
  std::string Where(const PipeInstruction& instruction) const;
  // ForwardLayers(first, last), in recomputed segments of interval_ decoder
  // layers while training with an interval.
  torch::Tensor StageForward(int first, int last, const torch::Tensor& input, const TokenBatch& batch);

  std::shared_ptr<torch::nn::Module> model_;
  ModelInterface* family_ = nullptr;
  std::shared_ptr<const ParallelState> parallel_;
  Communicator* pipeline_ = nullptr;
  torch::Device device_ = torch::kCPU;
  std::unique_ptr<Engine> engine_;
  PipelineScheduleKind kind_ = PipelineScheduleKind::kOneForwardOneBackward;
  PipelineShape shape_;
  int stage_ = 0;
  std::vector<int> boundaries_;
  std::vector<std::string> partition_lines_;
  std::set<std::string> held_;
  std::vector<TiedSet> tied_;
  std::vector<PipeInstruction> stream_;
  int fail_forward_ = -1;
  int misstate_shape_ = -1;
  int interval_ = 0;              // pipeline.activation_checkpoint_interval
  bool synchronized_timing_ = false;  // wall_clock_breakdown on a GPU: Note [Measured bubble]
  int head_layer_ = 0;            // the last layer's index (the head); decoder layers are 1 .. head_layer_ - 1
  int recomputed_segments_ = 0;   // this batch's, for PipelineBatchResult
  int64_t released_output_bytes_ = 0;  // Note [Outputs released once sent]: this batch's
};

// Tests only: skips the sum of tied parameters' gradients across stages, to
// show that the parity tests catch a broken reduction.
void BreakTiedGradientSumForTesting(bool broken);

// Writes `timelines` (one per stage, as TrainBatch returned them) as a
// Chrome trace (chrome://tracing, Perfetto): one row per stage.
absl::Status WritePipelineTimeline(const std::string& path, const std::vector<std::vector<PipelineEvent>>& timelines);

}  // namespace dslaunch::runtime
