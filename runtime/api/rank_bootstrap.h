// The one way a rank process starts (Note [One rank bootstrap]): dsrank and
// every program using <dslaunch/runtime.h> call StartRank, so each gets the
// same device choice, process groups, flight recorder and heartbeats.
//
// Note [One rank bootstrap]
// StartRank, in order:
//   1. the device: `cuda:<LOCAL_RANK mod visible GPUs>` when CUDA is wanted
//      and present (made LibTorch's current device: kernels and NCCL launch
//      there), otherwise the CPU;
//   2. the rendezvous store, when dslaunch started the process;
//   3. every process group of the job's grid (ParallelState), NCCL on GPUs
//      and Gloo on the CPU, each wrapped in the rank's flight recorder;
//   4. heartbeats to the rank's agent, carrying the last finished step and the
//      recorder's recent collectives, so the controller can tell a hang from
//      slow progress and name the rank behind (Note [Rank heartbeats]).
// Without dslaunch the process is one rank with no store and no heartbeats.
//
// Not thread-safe, except ReportStep, ReportMetrics and heartbeats_accepted
// (any thread).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/heartbeat_sender.h"
#include "common/rank_contract.h"
#include "common/store_client.h"
#include "runtime/comm/flight_recorder.h"
#include "runtime/parallel/parallel_state.h"

namespace dslaunch::runtime {

struct RankOptions {
  enum class DeviceChoice { kAuto, kCpu, kCuda };
  DeviceChoice device = DeviceChoice::kAuto;
  ParallelSizes parallel;
  // > 0: cap LibTorch's CUDA allocator at this many GiB (stands in for a smaller GPU).
  double cuda_memory_limit_gb = 0;
};

// "auto", "cpu", "cuda"; InvalidArgument naming the value otherwise.
absl::StatusOr<RankOptions::DeviceChoice> ParseDeviceChoice(const std::string& text);

class RankRuntime {
 public:
  RankRuntime(const RankRuntime&) = delete;
  RankRuntime& operator=(const RankRuntime&) = delete;
  ~RankRuntime();  // stops the heartbeats before the groups go

  const RankEnvironment& environment() const { return env_; }
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  torch::Device device() const { return device_; }
  // Null without dslaunch.
  StoreClient* store() const { return store_.get(); }
  const std::shared_ptr<const ParallelState>& parallel() const { return parallel_; }
  // Every collective of every group of this rank goes through it (Note
  // [Comms logger] attaches there).
  FlightRecorder& flight_recorder() { return recorder_; }

  // The last finished step, for the heartbeats; the first one is sent at once.
  void ReportStep(int64_t step);
  // The run's figures at the last finished step (loss, tokens/s, ...), sent
  // with the next heartbeat for `dslaunch status` and /metrics.
  void ReportMetrics(const RankMetrics& metrics);
  // Whether the agent accepted one of this rank's heartbeats (so the
  // controller has its step); false without heartbeats.
  bool heartbeats_accepted() const;
  bool has_heartbeats() const { return heartbeats_ != nullptr; }

 private:
  friend absl::StatusOr<std::unique_ptr<RankRuntime>> StartRank(const RankEnvironment& env,
                                                                const RankOptions& options);
  RankRuntime(RankEnvironment env, torch::Device device) : env_(std::move(env)), device_(device) {}

  const RankEnvironment env_;
  const torch::Device device_;
  std::unique_ptr<StoreClient> store_;
  FlightRecorder recorder_;  // outlives the groups and the heartbeat thread
  std::shared_ptr<const ParallelState> parallel_;
  std::atomic<int64_t> step_{-1};
  std::atomic<bool> reported_first_step_{false};
  std::mutex metrics_mu_;
  RankMetrics metrics_;  // guarded by metrics_mu_
  std::unique_ptr<HeartbeatSender> heartbeats_;
};

// Errors name what failed: the device, the store variables, a process group.
absl::StatusOr<std::unique_ptr<RankRuntime>> StartRank(const RankEnvironment& env, const RankOptions& options);

}  // namespace dslaunch::runtime
