// <dslaunch/runtime.h>: Initialize and Session, over the rank bootstrap
// (rank_bootstrap.h) and the engine.
#include <dslaunch/runtime.h>

#include "absl/strings/str_cat.h"
#include "runtime/api/rank_bootstrap.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/config/config_loader.h"
#include "runtime/engine/engine.h"

namespace dslaunch::runtime {

struct Session::State {
  std::unique_ptr<RankRuntime> rank;  // outlives the engine: it owns the groups
  DsConfig config;
  std::unique_ptr<Engine> engine;
};

Session::Session(std::unique_ptr<State> state) : state_(std::move(state)) {}
Session::~Session() {
  if (state_ != nullptr) state_->engine.reset();
}

int Session::rank() const { return state_->rank->rank(); }
int Session::world_size() const { return state_->rank->world_size(); }
int Session::local_rank() const { return state_->rank->environment().local_rank; }
torch::Device Session::device() const { return state_->rank->device(); }
int Session::data_parallel_rank() const { return state_->rank->parallel()->coordinate().data; }
int Session::data_parallel_size() const { return state_->rank->parallel()->topology().data_size(); }
int64_t Session::train_batch_size() const { return state_->config.train_batch_size; }
int64_t Session::micro_batch_size() const { return state_->config.train_micro_batch_size_per_gpu; }
int64_t Session::gradient_accumulation_steps() const { return state_->config.gradient_accumulation_steps; }
int64_t Session::global_steps() const { return state_->engine->global_steps(); }
double Session::current_lr() const { return state_->engine->CurrentLr(); }
Engine& Session::engine() { return *state_->engine; }
RankRuntime& Session::rank_runtime() { return *state_->rank; }

absl::Status Session::Backward(const torch::Tensor& loss) { return state_->engine->Backward(loss); }

absl::StatusOr<StepInfo> Session::Step() {
  absl::StatusOr<StepResult> result = state_->engine->Step();
  if (!result.ok()) return result.status();
  if (result->boundary) state_->rank->ReportStep(state_->engine->global_steps());
  StepInfo info;
  info.boundary = result->boundary;
  info.stepped = result->stepped;
  info.grad_norm = result->grad_norm;
  info.lr = result->lr;
  info.loss_scale = result->loss_scale;
  info.nonfinite = result->nonfinite;
  return info;
}

absl::Status Session::SaveCheckpoint(const std::string& dir, const std::string& tag,
                                     const std::map<std::string, int64_t>& client_state, int keep) {
  return EngineCheckpointer(*state_->engine).Save(dir, tag, client_state, keep);
}

absl::StatusOr<std::map<std::string, int64_t>> Session::LoadCheckpoint(const std::string& dir,
                                                                      const std::string& tag) {
  return EngineCheckpointer(*state_->engine).Load(dir, tag);
}

absl::StatusOr<std::unique_ptr<Session>> Initialize(std::shared_ptr<torch::nn::Module> model,
                                                    const std::string& ds_config_path,
                                                    const std::vector<std::string>& overrides) {
  absl::StatusOr<RankEnvironment> env = ReadRankEnvironment();
  if (!env.ok()) return env.status();
  std::vector<ConfigOverride> parsed;
  for (const std::string& text : overrides) {
    absl::StatusOr<ConfigOverride> one = ParseOverride(text);
    if (!one.ok()) return one.status();
    parsed.push_back(*one);
  }
  auto state = std::make_unique<Session::State>();
  absl::StatusOr<DsConfig> config = LoadDsConfig(ds_config_path, parsed, WorldShape{env->world_size});
  if (!config.ok()) return config.status();
  state->config = *config;
  if (config->pipeline.stages > 1) {
    // Before any process group: nothing half-started.
    return absl::UnimplementedError(absl::StrCat(
        ds_config_path, ": pipeline.stages=", config->pipeline.stages,
        " through Initialize() is not yet supported: a pipeline cuts a model family's layer list "
        "(runtime/model/model_interface.h), which a user's module does not declare; dsrank trains GPT and Llama "
        "pipelined"));
  }
  RankOptions options;
  options.parallel = ParallelSizes{.tensor = config->tensor_parallel.tp_size,
                                   .pipeline = config->pipeline.stages,
                                   .expert = ExpertParallelSize(*config)};
  absl::StatusOr<std::unique_ptr<RankRuntime>> rank = StartRank(*env, options);
  if (!rank.ok()) return rank.status();
  state->rank = std::move(*rank);
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(std::move(model), state->config, state->rank->parallel(), state->rank->device());
  if (!engine.ok()) return engine.status();
  state->engine = std::move(*engine);
  return std::unique_ptr<Session>(new Session(std::move(state)));
}

}  // namespace dslaunch::runtime
