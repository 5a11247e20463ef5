// Pipeline schedules as instruction streams (Note [Pipeline schedules]).
//
// Note [Pipeline schedules]
// A pipeline of S stages runs M micro-batches per optimizer step. Each
// stage's work is a list of instructions: a forward or a backward pass of
// one micro-batch through one of its model chunks, and exchanges, each a
// batch of point-to-point transfers posted together
// (Communicator::SendRecv). The schedules:
//   - GPipe: every forward, then every backward; M micro-batches of
//     activations in flight.
//   - 1F1B (DeepSpeed's TrainSchedule, Megatron's non-interleaved schedule):
//     stage s runs min(S-s-1, M) warm-up forwards, then alternates one
//     forward and one backward, then drains; at most S-s micro-batches in
//     flight. Bubble (S-1)/(M+S-1) of the step.
//   - Interleaved 1F1B (Megatron, arXiv 2104.04473): each rank holds v model
//     chunks (virtual stages chunk·S + s); the bubble shrinks to
//     (S-1)/(v·M+S-1) for more, smaller transfers. M must be a multiple of S.
// Exchanges come from the compute order alone: before each pass, one batch
// sends what the previous pass produced and receives what this pass needs
// (Megatron's send_forward_recv_backward and the like); what is left is
// flushed at the end. The first transfer of each direction between two
// stages in a step is preceded by a header (shape and dtype), so the
// receiver allocates its buffer and a stage that disagrees fails at once.
// CheckSchedules runs all stages' streams against each other with
// rendezvous transfers (a transfer completes only when both sides posted
// it, the strictest backend) and in-order pairing per pair of ranks, and
// proves: every pass once, each forward before its backward, sends and
// receives matched one to one with the same tensor, no deadlock, and the
// bound on micro-batches in flight.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

enum class PipelineScheduleKind { kGPipe, kOneForwardOneBackward, kInterleaved };

// "gpipe", "1f1b", "interleaved" (what pipeline.schedule takes).
absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(const std::string& name);
std::string PipelineScheduleName(PipelineScheduleKind kind);

struct PipelineShape {
  int stages = 1;          // S: ranks along the pipeline
  int micro_batches = 1;   // M: gradient_accumulation_steps
  int virtual_stages = 1;  // v: model chunks per rank (interleaved only)
  int virtual_count() const { return stages * virtual_stages; }
};

// Ok when `kind` can run `shape`; otherwise InvalidArgument naming the rule.
absl::Status ValidatePipelineShape(PipelineScheduleKind kind, const PipelineShape& shape);

enum class PipeTensor { kActivation, kGradient };

struct PipeTransfer {
  bool send = false;
  PipeTensor tensor = PipeTensor::kActivation;
  int micro_batch = 0;
  // The virtual stage that consumes the tensor: an activation's next stage,
  // a gradient's previous one.
  int virtual_stage = 0;
  int peer = 0;         // the other side's stage
  bool header = false;  // the shape/dtype header, not the tensor
};

enum class PipeOp { kForward, kBackward, kExchange };

struct PipeInstruction {
  PipeOp op = PipeOp::kExchange;
  int micro_batch = -1;  // passes
  int chunk = -1;        // passes: this rank's model chunk; virtual stage chunk·S + stage
  std::vector<PipeTransfer> transfers;  // exchanges: posted together, in this order
};

// Stage `stage`'s instructions for one step.
absl::StatusOr<std::vector<PipeInstruction>> BuildStageSchedule(PipelineScheduleKind kind, const PipelineShape& shape,
                                                                int stage);

struct ScheduleCheck {
  std::vector<int> peak_in_flight;  // per stage: passes forwarded, not yet backwarded
  std::vector<int> in_flight_bound;
  int rounds = 0;  // lock-step rounds the simulation took
  // In model time: every forward and backward pass of one chunk takes 1/v
  // (a whole micro-batch through a stage's layers takes 1 each way),
  // transfers take none but wait for their peer. The step's length, and
  // each stage's idle share of it.
  double makespan = 0;
  std::vector<double> bubble;
};

// Simulates every stage's stream (Note [Pipeline schedules]); an Internal
// error names the stage and instruction where a rule breaks.
absl::StatusOr<ScheduleCheck> CheckSchedules(PipelineScheduleKind kind, const PipelineShape& shape);
// The same for given streams, one per stage, and in-flight bounds (tests
// feed it broken schedules).
absl::StatusOr<ScheduleCheck> CheckStreams(const PipelineShape& shape,
                                           const std::vector<std::vector<PipeInstruction>>& streams,
                                           const std::vector<int>& in_flight_bound);

// The schedule's idle fraction of a step with equal passes (forward and
// backward each taking one unit per stage): (S-1)/(v·M+S-1).
double TheoreticalBubbleFraction(PipelineScheduleKind kind, const PipelineShape& shape);

// "forward mb 3 chunk 0", "exchange [send activation mb 2 vs 3 -> stage 1]".
std::string DescribeInstruction(const PipeInstruction& instruction);

}  // namespace dslaunch::runtime
