#include "runtime/api/rank_bootstrap.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

absl::StatusOr<RankOptions::DeviceChoice> ParseDeviceChoice(const std::string& text) {
  if (text == "auto") return RankOptions::DeviceChoice::kAuto;
  if (text == "cpu") return RankOptions::DeviceChoice::kCpu;
  if (text == "cuda") return RankOptions::DeviceChoice::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("device '", text, "': expected auto, cpu or cuda"));
}

RankRuntime::~RankRuntime() { heartbeats_.reset(); }

void RankRuntime::ReportStep(int64_t step) {
  step_.store(step);
  if (heartbeats_ != nullptr && !reported_first_step_.exchange(true)) heartbeats_->SendSoon();
}

void RankRuntime::ReportMetrics(const RankMetrics& metrics) {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  metrics_ = metrics;
}

bool RankRuntime::heartbeats_accepted() const { return heartbeats_ != nullptr && heartbeats_->accepted() > 0; }

absl::StatusOr<std::unique_ptr<RankRuntime>> StartRank(const RankEnvironment& env, const RankOptions& options) {
  using DeviceChoice = RankOptions::DeviceChoice;
  const bool have_cuda = torch::cuda::is_available();
  if (options.device == DeviceChoice::kCuda && !have_cuda) {
    return absl::FailedPreconditionError("device cuda: no CUDA device is visible to this rank");
  }
  const bool cuda = options.device == DeviceChoice::kCuda || (options.device == DeviceChoice::kAuto && have_cuda);
  const torch::Device device =
      cuda ? torch::Device(torch::kCUDA, env.local_rank % std::max<int>(1, torch::cuda::device_count()))
           : torch::Device(torch::kCPU);
  // Kernels and NCCL launch on the current device: make it this rank's GPU.
  compat::SetCurrentCudaDevice(device);
  if (options.cuda_memory_limit_gb > 0) {
    absl::Status limited = compat::LimitCudaMemory(device.index(), options.cuda_memory_limit_gb * (1 << 30));
    if (!limited.ok()) return absl::Status(limited.code(), absl::StrCat("cuda memory limit: ", limited.message()));
  }

  std::unique_ptr<RankRuntime> runtime(new RankRuntime(env, device));
  if (env.has_store()) {
    absl::StatusOr<std::unique_ptr<StoreClient>> store = StoreClient::FromContract(env);
    if (!store.ok()) return store.status();
    runtime->store_ = std::move(*store);
  } else if (env.world_size > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        rank_env::kWorldSize, "=", env.world_size, " but ", rank_env::kStoreAddr,
        " is not set: start this program with dslaunch to run it on several ranks"));
  }
  StoreClient* store = runtime->store_.get();
  const CommBackend backend = cuda ? CommBackend::kNccl : CommBackend::kGloo;
  auto parallel = ParallelState::Create(
      env.world_size, env.rank, options.parallel,
      [store, backend](const GroupSpec& spec) { return CreateCommunicator(backend, *store, spec); },
      &runtime->recorder_);
  if (!parallel.ok()) return parallel.status();
  runtime->parallel_ = std::move(*parallel);

  RankRuntime* raw = runtime.get();
  auto heartbeats = HeartbeatSender::Start(env, [raw](HeartbeatRequest* beat) {
    beat->set_step(raw->step_.load());
    raw->recorder_.Snapshot(beat->mutable_recent_collectives());
    std::lock_guard<std::mutex> lock(raw->metrics_mu_);
    if (raw->metrics_.ByteSizeLong() > 0) *beat->mutable_metrics() = raw->metrics_;
  });
  if (!heartbeats.ok()) return heartbeats.status();
  runtime->heartbeats_ = std::move(*heartbeats);
  return runtime;
}

}  // namespace dslaunch::runtime
