// dsrank: one rank of the embedded runtime, started by dslaunch for a job
// file (`dslaunch --num_gpus 2 configs/gpt-tiny.cfg`).
//
//   dsrank JOB.cfg [--override key.path=value]... [--loss_log PATH] [--device auto|cpu|cuda]
//   (the whole command line: runtime/config/dsrank_arguments.h)
//
// It reads the rank environment (Note [Rank environment contract]), starts
// the rank the way every runtime program does (Note [One rank bootstrap]:
// device, process groups, flight recorder, heartbeats) and trains; a
// restarted attempt resumes from the checkpoint the controller committed.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "runtime/api/rank_bootstrap.h"
#include "runtime/comm/peer_failure.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/dsrank_arguments.h"
#include "runtime/dsrank/gpt_trainer.h"
#include "runtime/dsrank/rank_file_system.h"
#include "runtime/dsrank/runtime_report.h"

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
  if (arguments->report) {
    std::fputs(RuntimeReport().c_str(), stdout);
    return 0;
  }
  std::vector<ConfigOverride> overrides;
  for (const std::string& text : arguments->overrides) {
    auto parsed = ParseOverride(text);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    overrides.push_back(*parsed);
  }
  auto device_choice = ParseDeviceChoice(arguments->device);
  if (!device_choice.ok()) return Fail(absl::StrCat("--device: ", device_choice.status().message()));
  auto env = ReadRankEnvironment();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  const std::string& config_path = arguments->job_file;

  // Note [Elastic batch]: in an elastic job (the launcher says so) a global
  // batch the world size cannot keep is adjusted, and the change stated.
  std::string batch_note;
  auto job = env->elastic ? LoadElasticJobConfig(config_path, overrides, WorldShape{env->world_size}, &batch_note)
                          : LoadJobConfig(config_path, overrides, WorldShape{env->world_size});
  if (!job.ok()) return Fail(std::string(job.status().message()));
  if (!batch_note.empty() && env->rank == 0) std::fprintf(stderr, "dsrank: %s\n", batch_note.c_str());
  for (const std::string& line : job->without_effect) {
    if (env->rank == 0) std::fprintf(stderr, "dsrank: warning: ds_config %s\n", line.c_str());
  }
  for (const std::string& line : job->not_yet_supported) {
    if (env->rank == 0) std::fprintf(stderr, "dsrank: not yet supported: %s\n", line.c_str());
  }
  if (!job->not_yet_supported.empty()) {
    return Fail("the job asks for features this runtime does not have yet (listed above)");
  }
  if (env->rank == 0 && arguments->quiet_config) {
    std::printf("dsrank: configuration of %s resolved for %d rank(s) (dslaunch --validate %s prints it)\n",
                config_path.c_str(), env->world_size, config_path.c_str());
    std::fflush(stdout);
  } else if (env->rank == 0) {
    std::printf("dsrank: resolved configuration of %s for %d rank(s):\n%s\n", config_path.c_str(),
                env->world_size, DescribeJobConfig(*job).c_str());
    std::fflush(stdout);
  }

  // Note [One rank bootstrap]: device, store, process groups, heartbeats.
  RankOptions options;
  options.device = *device_choice;
  options.cuda_memory_limit_gb = arguments->cuda_memory_limit_gb;
  options.parallel = ParallelSizes{.tensor = job->ds.tensor_parallel.tp_size,
                                   .pipeline = job->ds.pipeline.stages,
                                   .expert = ExpertParallelSize(job->ds)};
  auto rank = StartRank(*env, options);
  if (!rank.ok()) return Fail(std::string(rank.status().message()));
  if (job->ds.fp16.enabled && !(*rank)->device().is_cuda()) {
    // Before the model: LibTorch's CPU kernels do not train in fp16 (1.13
    // has no fp16 LayerNorm), and loss scaling exists for GPUs.
    return Fail(absl::StrCat("fp16.enabled=true (train.precision=fp16) needs a GPU, and this rank runs on ",
                             (*rank)->device().str(),
                             ": LibTorch's CPU kernels do not train in fp16; use train.precision=bf16 or fp32 there"));
  }

  TrainerContext context;
  context.rank = env->rank;
  context.world_size = env->world_size;
  context.store = (*rank)->store();
  context.parallel = (*rank)->parallel();
  context.world = context.parallel->world();
  context.device = (*rank)->device();
  context.loss_log = arguments->loss_log;
  context.pipeline_timeline = arguments->pipeline_timeline;
  context.raise_at_step = arguments->raise_at_step;
  context.raise_rank = static_cast<int>(arguments->raise_rank);
  context.shape_fault_at_step = arguments->shape_fault_at_step;
  context.exit_at_step = arguments->exit_at_step;
  context.hang_at_step = arguments->hang_at_step;
  context.hang_rank = static_cast<int>(arguments->hang_rank);
  context.attempt = env->attempt;
  context.resume_tag = env->resume_tag;
  context.rank_runtime = rank->get();
  context.file_system = &RankFileSystem();
  if (context.device.is_cuda()) torch::cuda::manual_seed_all(job->train.seed);
  torch::manual_seed(job->train.seed + context.rank);

  absl::Status trained = TrainGpt(*job, context);
  if (!trained.ok()) {
    if (context.world == nullptr) return Fail(std::string(trained.message()));
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
