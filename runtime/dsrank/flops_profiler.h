// DeepSpeed's flops profiler (ds_config `flops_profiler`) for dsrank.
//
// Note [Flops profiler]
// At `profile_step` the training loop waits for the device around the
// first micro-batch's forward and backward and around the optimizer step,
// and reads the clock each time (the other steps are not touched: off, the
// profiler costs one comparison per micro-batch). After that step every
// rank runs the same micro-batch twice more, without gradients, one layer
// at a time through ModelInterface::ForwardLayers, timing each layer of the
// second pass the same way (the first warms up kernels a forward without
// gradients meets for the first time): the per-module forward latency DeepSpeed measures with hooks, which
// LibTorch's C++ modules do not have. Rank 0 then prints DeepSpeed's three
// sections (or writes them to `output_file`): the profile summary (sizes,
// params, forward MACs and flops, latencies and FLOPS of forward, backward,
// step and iteration, samples/s), the aggregated top `top_modules` modules by
// params, MACs and forward latency at depth 0 (the model) and depth 1 (its
// layers), and, with `detailed`, every layer with its share of each
// (`module_depth` 0 prints the model alone).
//
// MACs are counted from the parameters, not traced: a layer's matrix
// parameters (2-D, tied ones included where the layer uses them; not those
// of an embedding layer, a lookup) cost rows × their elements each, and a
// layer with attention (type *Block) adds its core, 2 · rows · time · width
// (QKᵀ and the weighting of V), with width the input size of its first
// matrix. rows = batch × time tokens. Flops = 2 × MACs, as DeepSpeed counts.
// At ZeRO stage 3 the parameters keep their shapes while their storage is
// released, so the count is the same; the layer-by-layer pass runs through
// the engine's unit runner as training does, so each layer is gathered for
// its pass and its latency includes that all-gather (every rank runs the
// pass, so the collectives match).
// Not yet: pipeline stages, and mixtures of experts (a token runs top-k
// experts, not every matrix): each refused at start, naming the key.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/model/model_interface.h"

namespace dslaunch::runtime {

struct ProfileShape {
  int world_size = 1;
  int data_parallel_size = 1;
  int model_parallel_size = 1;  // tensor × pipeline
  int64_t global_batch = 0;     // samples per step
};

class FlopsProfiler {
 public:
  // Null when the block is off. OK or why this job cannot be profiled.
  static absl::Status Check(const JobConfig& job);
  // Rank 0 also makes output_file's folder and checks the file can be written.
  static absl::StatusOr<std::unique_ptr<FlopsProfiler>> Create(const FlopsProfilerConfig& config,
                                                               torch::Device device, int rank);

  bool ProfilesStep(int64_t step) const { return step == config_.profile_step; }

  // The moments of the profiled step: the first micro-batch's forward and
  // backward, the optimizer step. Each waits for the device, then reads the clock.
  enum Moment { kForwardBegin, kForwardEnd, kBackwardEnd, kStepBegin, kStepEnd, kMoments };
  void Mark(Moment moment) { marks_[moment] = Now(); }

  // After the profiled step: the per-layer pass on `batch` (every rank), then
  // rank 0 prints or writes the report.
  absl::Status Report(int64_t step, const TokenBatch& batch, ModelInterface& model, torch::nn::Module& module,
                      const ProfileShape& shape, int rank, std::FILE* out);

 private:
  FlopsProfiler(FlopsProfilerConfig config, torch::Device device) : config_(std::move(config)), device_(device) {}
  double Now() const;

  const FlopsProfilerConfig config_;
  const torch::Device device_;
  double marks_[kMoments] = {};
};

}  // namespace dslaunch::runtime
