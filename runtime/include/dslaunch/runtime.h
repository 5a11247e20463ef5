// The public C++ API of the dslaunch runtime: the counterpart of
// `deepspeed.initialize`. Installed as <dslaunch/runtime.h>; the only header
// a program needs (it brings LibTorch's and Abseil's status types, nothing of
// the runtime's internals).
//
//   #include <dslaunch/runtime.h>
//
//   auto model = std::make_shared<MyModule>();
//   auto session = dslaunch::runtime::Initialize(model, "ds_config.json");
//   if (!session.ok()) { ... }                   // every config problem at once
//   for (...) {
//     torch::Tensor loss = model->forward(batch.to((*session)->device()));
//     (*session)->Backward(loss);
//     (*session)->Step();                        // steps at the accumulation boundary
//   }
//   (*session)->SaveCheckpoint("checkpoints", "step100", {{"consumed_samples", n}});
//
// Launch with `dslaunch --num_gpus N ./my_program`: the process reads its
// rank from the environment dslaunch sets, joins the job's process groups
// (NCCL with CUDA, Gloo otherwise), and heartbeats its step and recent
// collectives to its agent, so a hung or frozen rank is diagnosed by name
// (Note [One rank bootstrap]). Without dslaunch it runs as one rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

class Engine;
class RankRuntime;

// What one Step() did.
struct StepInfo {
  bool boundary = false;    // it ended an accumulation window
  bool stepped = false;     // the optimizer stepped (false on fp16 overflow or a non-finite step)
  double grad_norm = 0;     // before clipping (0 when not a boundary)
  double lr = 0;
  double loss_scale = 1;
  bool nonfinite = false;   // skipped: the loss or gradient norm was not finite (fp32/bf16)
};

// A rank's training session. Not thread-safe.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  // This rank's device; the model is already there.
  torch::Device device() const;
  // This rank's place among the data-parallel replicas (which slice of each
  // global batch it reads).
  int data_parallel_rank() const;
  int data_parallel_size() const;

  // The resolved batch triad of ds_config.
  int64_t train_batch_size() const;
  int64_t micro_batch_size() const;
  int64_t gradient_accumulation_steps() const;

  // Scales the loss for accumulation (and fp16 loss scaling) and runs backward.
  absl::Status Backward(const torch::Tensor& loss);
  // Steps the optimizer at the accumulation boundary; a boundary also tells
  // the agent the step finished (heartbeats).
  absl::StatusOr<StepInfo> Step();
  int64_t global_steps() const;
  double current_lr() const;

  // Sharded checkpoint: every rank calls it. A crash at any point leaves the
  // previous checkpoint and `latest` intact. `client_state` is yours
  // (sampler position, ...), returned by LoadCheckpoint.
  absl::Status SaveCheckpoint(const std::string& dir, const std::string& tag,
                              const std::map<std::string, int64_t>& client_state, int keep = 0);
  // Loads `tag` ("" = the one `latest` names). NotFound when there is none.
  absl::StatusOr<std::map<std::string, int64_t>> LoadCheckpoint(const std::string& dir, const std::string& tag = "");

  // The runtime's own objects, for programs built inside the dslaunch tree
  // (their headers are not installed).
  Engine& engine();
  RankRuntime& rank_runtime();

 private:
  friend absl::StatusOr<std::unique_ptr<Session>> Initialize(std::shared_ptr<torch::nn::Module> model,
                                                             const std::string& ds_config_path,
                                                             const std::vector<std::string>& overrides);
  struct State;
  explicit Session(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Reads and resolves `ds_config_path` (JSON or YAML) for this job's world,
// applying `overrides` ("key.path=value", as dsrank's --override), starts the
// rank (device, process groups, heartbeats), moves `model` to the rank's
// device and builds the engine. Errors name the file, key and value.
absl::StatusOr<std::unique_ptr<Session>> Initialize(std::shared_ptr<torch::nn::Module> model,
                                                    const std::string& ds_config_path,
                                                    const std::vector<std::string>& overrides = {});

}  // namespace dslaunch::runtime
