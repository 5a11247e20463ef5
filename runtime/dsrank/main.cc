// dsrank: one rank of the embedded runtime, started by dslaunch for a job
// file (`dslaunch --num_gpus 2 configs/gpt-tiny.cfg`).
//
//   dsrank JOB.cfg [--override key.path=value]... [--loss_log PATH] [--device auto|cpu|cuda]
//   (the whole command line: runtime/config/dsrank_arguments.h)
//
// It reads the rank environment (RANK, WORLD_SIZE, LOCAL_RANK and the
// DSLAUNCH_* store variables), joins the job's communicator (NCCL for CUDA,
// Gloo for CPU), and trains; a restarted attempt resumes from the
// checkpoint `latest` names.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/heartbeat_sender.h"
#include "common/env_int.h"
#include "common/store_client.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/flight_recorder.h"
#include "runtime/comm/peer_failure.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/dsrank_arguments.h"
#include "runtime/dsrank/gpt_trainer.h"
#include "runtime/torch_compat.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "dsrank: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dslaunch;
  using namespace dslaunch::runtime;
  auto arguments = ParseDsrankArguments(std::vector<std::string>(argv + 1, argv + argc));
  if (!arguments.ok()) return Fail(std::string(arguments.status().message()));
  if (!arguments->print.empty()) {  // --help, --version
    std::fputs(arguments->print.c_str(), stdout);
    return 0;
  }
  std::vector<ConfigOverride> overrides;
  for (const std::string& text : arguments->overrides) {
    auto parsed = ParseOverride(text);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    overrides.push_back(*parsed);
  }
  const std::string& config_path = arguments->job_file;
  const std::string& loss_log = arguments->loss_log;
  const std::string& device_choice = arguments->device;
  const int64_t exit_at_step = arguments->exit_at_step;
  const int64_t hang_at_step = arguments->hang_at_step;
  const int64_t hang_rank = arguments->hang_rank;
  const double cuda_memory_limit_gb = arguments->cuda_memory_limit_gb;

  TrainerContext context;
  context.rank = EnvInt("RANK", 0);
  context.world_size = EnvInt("WORLD_SIZE", 1);
  context.loss_log = loss_log;
  context.exit_at_step = exit_at_step;
  context.hang_at_step = hang_at_step;
  context.hang_rank = static_cast<int>(hang_rank);
  context.attempt = EnvInt("DSLAUNCH_ATTEMPT", 0);
  if (const char* tag = std::getenv("DSLAUNCH_RESUME_TAG")) context.resume_tag = tag;
  const int local_rank = EnvInt("LOCAL_RANK", 0);

  // Note [Elastic batch]: in an elastic job (the launcher says so) a global
  // batch the world size cannot keep is adjusted, and the change stated.
  std::string batch_note;
  auto job = std::getenv("DSLAUNCH_ELASTIC") != nullptr
                 ? LoadElasticJobConfig(config_path, overrides, WorldShape{context.world_size}, &batch_note)
                 : LoadJobConfig(config_path, overrides, WorldShape{context.world_size});
  if (!job.ok()) return Fail(std::string(job.status().message()));
  if (!batch_note.empty() && context.rank == 0) std::fprintf(stderr, "dsrank: %s\n", batch_note.c_str());
  for (const std::string& line : job->not_yet_supported) {
    if (context.rank == 0) std::fprintf(stderr, "dsrank: not yet supported: %s\n", line.c_str());
  }
  if (!job->not_yet_supported.empty()) {
    return Fail("the job asks for features this runtime does not have yet (listed above)");
  }
  if (context.rank == 0) {
    std::printf("dsrank: resolved configuration of %s for %d rank(s):\n%s\n", config_path.c_str(),
                context.world_size, DescribeJobConfig(*job).c_str());
    std::fflush(stdout);
  }

  const bool cuda = device_choice == "cuda" || (device_choice == "auto" && torch::cuda::is_available());
  if (device_choice == "cuda" && !torch::cuda::is_available()) return Fail("--device cuda: no CUDA device");
  context.device = cuda ? torch::Device(torch::kCUDA, local_rank % std::max<int>(1, torch::cuda::device_count()))
                        : torch::Device(torch::kCPU);
  // Kernels and NCCL launch on the current device: make it this rank's GPU.
  compat::SetCurrentCudaDevice(context.device);
  if (cuda_memory_limit_gb > 0) {
    // Stands in for a smaller GPU (benchmarks of what fits only with ZeRO-3 offload).
    absl::Status limited = compat::LimitCudaMemory(context.device.index(), cuda_memory_limit_gb * (1 << 30));
    if (!limited.ok()) return Fail(absl::StrCat("--cuda_memory_limit_gb: ", limited.message()));
  }

  std::unique_ptr<StoreClient> store;
  FlightRecorder recorder;  // outlives `world` and the heartbeat thread
  std::unique_ptr<Communicator> world;
  if (context.world_size > 1 || std::getenv("DSLAUNCH_STORE_ADDR") != nullptr) {
    auto client = StoreClient::FromEnvironment();
    if (!client.ok()) return Fail(std::string(client.status().message()));
    store = std::move(*client);
    context.store = store.get();
    GroupSpec group{"world", {}, context.rank};
    for (int r = 0; r < context.world_size; ++r) group.members.push_back(r);
    auto comm = CreateCommunicator(cuda ? CommBackend::kNccl : CommBackend::kGloo, *store, group);
    if (!comm.ok()) return Fail(std::string(comm.status().message()));
    // Every collective goes through the flight recorder the heartbeats carry.
    world = std::make_unique<RecordingCommunicator>(std::move(*comm), &recorder);
    context.world = world.get();
  }
  // Note [Rank heartbeats]: step and recent collectives to this host's agent.
  std::atomic<int64_t> heartbeat_step{-1};
  context.heartbeat_step = &heartbeat_step;
  auto heartbeats = HeartbeatSender::StartFromEnvironment([&](HeartbeatRequest* beat) {
    beat->set_step(heartbeat_step.load());
    recorder.Snapshot(beat->mutable_recent_collectives());
  });
  if (heartbeats != nullptr) {
    context.heartbeats_accepted = [&heartbeats] { return heartbeats->accepted() > 0; };
    context.heartbeat_now = [&heartbeats] { heartbeats->SendSoon(); };
  }
  if (cuda) torch::cuda::manual_seed_all(job->train.seed);
  torch::manual_seed(job->train.seed + context.rank);

  absl::Status trained = TrainGpt(*job, context);
  if (!trained.ok()) {
    if (world == nullptr) return Fail(std::string(trained.message()));
    // Note [A failed rank leaves at once]: the other ranks may be inside a
    // collective this rank will never join. Tearing NCCL down then waits for
    // them (ncclCommDestroy, and ncclCommAbort too, synchronise the ranks of
    // a node to free shared memory): a rank on cuda:1 that failed its step
    // sat 15 s in teardown until the hang detector stopped the job. Leaving
    // without destructors frees the same resources (the driver reclaims the
    // GPU's) and hands the controller an exit code it acts on in
    // milliseconds; the trainer has already closed its files.
    Fail(std::string(trained.message()));
    std::fflush(stdout);
    std::fflush(stderr);
    // Note [A peer's failure is not the root cause]: the failing rank's exit
    // reaches the controller first, which stops this one; the wait is bounded
    // for a rank with no controller.
    if (IsPeerFailure(trained) && context.store != nullptr) {
      std::this_thread::sleep_for(std::chrono::seconds(10));
    }
    std::_Exit(1);
  }
  return 0;
}
