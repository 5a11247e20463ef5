#include "runtime/api/dslaunch_runtime.h"

#include "common/env_int.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

absl::StatusOr<Session> Initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& ds_config_path,
                                   const std::vector<ConfigOverride>& overrides) {
  Session session;
  session.rank = EnvInt("RANK", 0);
  session.world_size = EnvInt("WORLD_SIZE", 1);
  session.local_rank = EnvInt("LOCAL_RANK", 0);
  auto config = LoadDsConfig(ds_config_path, overrides, WorldShape{session.world_size});
  if (!config.ok()) return config.status();
  session.config = *config;
  const bool cuda = torch::cuda::is_available();
  session.device = cuda ? torch::Device(torch::kCUDA, session.local_rank % torch::cuda::device_count())
                        : torch::Device(torch::kCPU);
  // Kernels and NCCL launch on the current device: make it this rank's GPU.
  compat::SetCurrentCudaDevice(session.device);
  if (session.world_size > 1) {
    auto store = StoreClient::FromEnvironment();
    if (!store.ok()) return store.status();
    session.store = std::move(*store);
    GroupSpec group{"world", {}, session.rank};
    for (int r = 0; r < session.world_size; ++r) group.members.push_back(r);
    auto world = CreateCommunicator(cuda ? CommBackend::kNccl : CommBackend::kGloo, *session.store, group);
    if (!world.ok()) return world.status();
    session.world = std::move(*world);
  }
  auto engine = Engine::Create(std::move(model), session.config, session.world.get(), session.device);
  if (!engine.ok()) return engine.status();
  session.engine = std::move(*engine);
  return session;
}

}  // namespace dslaunch::runtime
