// Trains the GPT of a job file on this rank: the loop that dsrank runs.
//
// Data parallelism over every rank of the job (ZeRO stage 0). The samples a
// step reads depend only on the number of samples consumed so far
// (runtime/data/distributed_sampler.h), and checkpoints store that number, so
// an interrupted run resumes with exactly the losses of an uninterrupted one.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "runtime/api/rank_bootstrap.h"
#include "runtime/comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/fs/file_system.h"

namespace dslaunch {
class StoreClient;
}

namespace dslaunch::runtime {

// What the trainer takes from the rank's bootstrap (runtime/api/rank_bootstrap.h)
// and from dsrank's command line.
struct TrainerContext {
  int rank = 0;
  int world_size = 1;
  StoreClient* store = nullptr;      // null with one rank and no launcher
  std::shared_ptr<const ParallelState> parallel;  // this rank's process groups
  Communicator* world = nullptr;     // parallel->world(): null with one rank
  torch::Device device = torch::kCPU;
  std::string pipeline_timeline;     // --pipeline_timeline
  int64_t raise_at_step = -1;        // --raise_at_step (tests)
  int raise_rank = 0;
  int64_t shape_fault_at_step = -1;  // --shape_fault_at_step (tests)
  std::string loss_log;              // rank 0 writes "step<TAB>loss" per step when set
  FILE* out = stdout;                // rank 0's progress lines
  // Checkpoints and the prepared dataset go through it (a fault-injecting
  // one in the test build of dsrank: dsrank/rank_file_system.h).
  FileSystem* file_system = &FileSystem::Default();
  // Fault injection for recovery tests: this rank fails right after finishing
  // this step (checkpoint included) on attempt 0. -1: never.
  int64_t exit_at_step = -1;
  int64_t hang_at_step = -1;  // likewise: stop making progress (but stay alive)
  int hang_rank = -1;         // only this rank hangs (-1: every rank)
  int attempt = 0;
  // DSLAUNCH_RESUME_TAG: the checkpoint the controller recorded as committed
  // (Note [Committed checkpoints]); empty: resume from `latest`, if any.
  std::string resume_tag;
  // Takes each finished step for the heartbeats (Note [Rank heartbeats]) and
  // says whether the agent has accepted one; null: no heartbeats.
  RankRuntime* rank_runtime = nullptr;
};

absl::Status TrainGpt(const JobConfig& job, const TrainerContext& context);

}  // namespace dslaunch::runtime
