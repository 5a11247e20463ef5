// The public C++ API of the dslaunch runtime: the counterpart of
// `deepspeed.initialize`. Installed as <dslaunch/runtime.h>.
//
//   #include <dslaunch/runtime.h>
//
//   auto model = std::make_shared<MyModule>();
//   auto session = dslaunch::runtime::Initialize(model, "ds_config.json");
//   if (!session.ok()) { ... }                 // every config problem at once
//   Engine& engine = *session->engine;
//   for (...) {
//     torch::Tensor loss = model->forward(batch);   // on session->device
//     engine.Backward(loss);
//     engine.Step();                              // steps at the accumulation boundary
//   }
//   EngineCheckpointer(engine).Save("checkpoints", "step100", {{"consumed_samples", n}});
//
// Launch with `dslaunch --num_gpus N ./my_program`; the process reads its rank
// from the environment dslaunch sets (RANK, WORLD_SIZE, LOCAL_RANK and the
// DSLAUNCH_* store variables) and joins the job's data-parallel group: NCCL
// when CUDA is available, Gloo otherwise. Without dslaunch it runs as one rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/store_client.h"
#include "runtime/comm/communicator.h"
#include "runtime/config/config_loader.h"
#include "runtime/checkpoint/engine_checkpointer.h"  // EngineCheckpointer: save and load
#include "runtime/engine/engine.h"

namespace dslaunch::runtime {

struct Session {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  torch::Device device = torch::kCPU;
  DsConfig config;                          // resolved for world_size
  std::unique_ptr<StoreClient> store;       // null without dslaunch
  std::unique_ptr<Communicator> world;      // null with one rank
  std::unique_ptr<Engine> engine;
};

// Reads and resolves `ds_config_path` (JSON or YAML) for this job's world,
// joins the world's communicator, moves `model` to the rank's device and
// builds the engine. Errors name the file, key and value.
absl::StatusOr<Session> Initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& ds_config_path,
                                   const std::vector<ConfigOverride>& overrides = {});

}  // namespace dslaunch::runtime
