#include "launcher/job_status_board.h"

#include <string.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace dslaunch {

JobStatusBoard::JobStatusBoard(std::string job_id, int max_restarts) : job_id_(std::move(job_id)) {
  job_.set_job_id(job_id_);
  job_.set_state(JOB_PLANNING);
  job_.set_max_restarts(max_restarts);
  job_.set_job_started_unix_ms(UnixMs());
  job_.set_eta_seconds(-1);
}

int64_t JobStatusBoard::UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void JobStatusBoard::SetState(JobState state) {
  std::lock_guard<std::mutex> lock(mu_);
  job_.set_state(state);
}

void JobStatusBoard::StartAttempt(int attempt, const LaunchPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  job_.set_attempt(attempt);
  job_.set_world_size(plan.world_size());
  job_.set_attempt_started_unix_ms(UnixMs());
  ranks_.assign(plan.ranks.size(), Rank{});
  for (const RankPlacement& placement : plan.ranks) {
    RankStatus& status = ranks_[placement.global_rank].status;
    status.set_global_rank(placement.global_rank);
    status.set_host(plan.nodes[placement.node_index].host);
    status.set_local_rank(placement.local_rank);
    status.set_state(RANK_SPAWNING);
    status.set_step(-1);
  }
  first_ = latest_ = StepSample{};
}

void JobStatusBoard::RankStarted(int attempt, int rank, int64_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (attempt != job_.attempt() || rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  ranks_[rank].status.set_state(RANK_RUNNING);
  ranks_[rank].status.set_pid(pid);
}

void JobStatusBoard::Heartbeat(int attempt, int rank, const RankProgress& progress, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (attempt != job_.attempt() || rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  Rank& entry = ranks_[rank];
  entry.beat_at = now;
  entry.status.set_step(progress.step());
  if (progress.has_metrics()) *entry.status.mutable_metrics() = progress.metrics();
  // The job's step moves when its slowest live rank's does.
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const Rank& other : ranks_) {
    if (other.status.state() == RANK_RUNNING || other.status.state() == RANK_SPAWNING) {
      slowest = std::min(slowest, other.status.step());
    }
  }
  if (slowest == std::numeric_limits<int64_t>::max() || slowest < 0 || slowest == latest_.step) return;
  latest_ = StepSample{slowest, now};
  if (first_.step < 0) first_ = latest_;
}

void JobStatusBoard::RankFinished(int attempt, int rank, const RankEnded& ended) {
  std::string how;
  switch (ended.state()) {
    case RANK_KILLED: {
      const char* name = sigabbrev_np(ended.signal());
      how = name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", ended.signal());
      break;
    }
    case RANK_LOST:
      how = absl::StrCat("lost: ", ended.detail());
      break;
    default:
      how = absl::StrCat("exited ", ended.exit_code());
  }
  if (ended.stopped_by_agent()) absl::StrAppend(&how, " (stopped)");
  std::lock_guard<std::mutex> lock(mu_);
  if (attempt != job_.attempt() || rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  ranks_[rank].status.set_state(ended.state());
  ranks_[rank].status.set_end(std::move(how));
}

void JobStatusBoard::AttemptFailed(std::string cause) {
  std::lock_guard<std::mutex> lock(mu_);
  job_.set_last_error(std::move(cause));
}

void JobStatusBoard::SetRestartsUsed(int used) {
  std::lock_guard<std::mutex> lock(mu_);
  job_.set_restarts_used(used);
}

void JobStatusBoard::CheckpointCommitted(std::string tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tag == job_.last_checkpoint()) return;
  job_.set_last_checkpoint(std::move(tag));
  job_.set_last_checkpoint_unix_ms(UnixMs());
}

JobStatusReply JobStatusBoard::Snapshot(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  JobStatusReply reply = job_;
  reply.set_now_unix_ms(UnixMs());
  int alive = 0;
  int64_t total_steps = 0;
  for (const Rank& rank : ranks_) {
    RankStatus* status = reply.add_ranks();
    *status = rank.status;
    status->set_heartbeat_age_ms(
        rank.beat_at ? std::chrono::duration_cast<std::chrono::milliseconds>(now - *rank.beat_at).count() : -1);
    if (rank.status.state() == RANK_SPAWNING || rank.status.state() == RANK_RUNNING) ++alive;
    total_steps = std::max(total_steps, rank.status.metrics().total_steps());
  }
  reply.set_ranks_alive(alive);
  reply.set_step(latest_.step);
  reply.set_total_steps(total_steps);
  reply.set_eta_seconds(-1);
  const double seconds = std::chrono::duration<double>(latest_.at - first_.at).count();
  if (latest_.step > first_.step && seconds > 0) {
    const double rate = (latest_.step - first_.step) / seconds;
    reply.set_steps_per_second(rate);
    if (total_steps > 0) {
      // From the newest step on: the time since it counts against the ETA.
      const double since = std::chrono::duration<double>(now - latest_.at).count();
      reply.set_eta_seconds(std::max(0.0, (total_steps - latest_.step) / rate - since));
    }
  }
  return reply;
}

}  // namespace dslaunch
