#include "launcher/job_status_board.h"

#include <gtest/gtest.h>

#include "launcher/status_command.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;

LaunchPlan TwoHostsOfTwo() {
  return BuildLaunchPlan({HostSlots{"node-a", {0, 1}}, HostSlots{"node-b", {0, 1}}});
}

RankProgress Beat(int64_t step, int64_t total = 0, double loss = 0) {
  RankProgress progress;
  progress.set_step(step);
  if (total > 0) {
    progress.mutable_metrics()->set_total_steps(total);
    progress.mutable_metrics()->set_loss(loss);
    progress.mutable_metrics()->set_tokens_per_second(1000);
  }
  return progress;
}

TEST(JobStatusBoard, AnAttemptListsItsRanksOnTheirHosts) {
  JobStatusBoard board("job-1", 3);
  board.SetState(JOB_STARTING);
  board.StartAttempt(0, TwoHostsOfTwo());
  board.RankStarted(0, 2, 4242);
  const JobStatusReply status = board.Snapshot();
  EXPECT_EQ(status.job_id(), "job-1");
  EXPECT_EQ(status.state(), JOB_STARTING);
  EXPECT_EQ(status.max_restarts(), 3);
  EXPECT_EQ(status.world_size(), 4);
  EXPECT_EQ(status.ranks_alive(), 4);
  ASSERT_EQ(status.ranks_size(), 4);
  EXPECT_EQ(status.ranks(2).host(), "node-b");
  EXPECT_EQ(status.ranks(2).local_rank(), 0);
  EXPECT_EQ(status.ranks(2).state(), RANK_RUNNING);
  EXPECT_EQ(status.ranks(2).pid(), 4242);
  EXPECT_EQ(status.ranks(0).state(), RANK_SPAWNING);
  EXPECT_EQ(status.ranks(0).step(), -1);
  EXPECT_EQ(status.ranks(0).heartbeat_age_ms(), -1);
  EXPECT_EQ(status.step(), -1);  // nobody finished a step
  EXPECT_EQ(status.eta_seconds(), -1);
}

// The job's step is its slowest live rank's; the rate and the ETA come from
// this attempt's heartbeats, measured at the snapshot.
TEST(JobStatusBoard, StepRateAndEtaFollowTheSlowestRank) {
  JobStatusBoard board("job-1", 0);
  board.StartAttempt(0, TwoHostsOfTwo());
  const auto t0 = JobStatusBoard::Clock::now();
  for (int rank = 0; rank < 4; ++rank) board.Heartbeat(0, rank, Beat(10, 110, 2.5), t0);
  board.Heartbeat(0, 0, Beat(20, 110, 2.0), t0 + 10s);  // rank 0 ahead: the job is still at 10
  JobStatusReply status = board.Snapshot(t0 + 10s);
  EXPECT_EQ(status.step(), 10);
  EXPECT_EQ(status.steps_per_second(), 0);
  for (int rank = 1; rank < 4; ++rank) board.Heartbeat(0, rank, Beat(20, 110, 2.0), t0 + 10s);
  status = board.Snapshot(t0 + 12s);
  EXPECT_EQ(status.step(), 20);
  EXPECT_EQ(status.total_steps(), 110);
  EXPECT_DOUBLE_EQ(status.steps_per_second(), 1.0);  // 10 steps in 10 s
  EXPECT_DOUBLE_EQ(status.eta_seconds(), 88.0);      // 90 steps at 1/s, 2 s of which have passed
  EXPECT_EQ(status.ranks(3).heartbeat_age_ms(), 2000);
  EXPECT_EQ(status.ranks(0).metrics().loss(), 2.0);

  // A heartbeat of an earlier attempt changes nothing; a new attempt starts over.
  board.StartAttempt(1, TwoHostsOfTwo());
  board.Heartbeat(0, 0, Beat(30), t0 + 13s);
  status = board.Snapshot(t0 + 13s);
  EXPECT_EQ(status.attempt(), 1);
  EXPECT_EQ(status.step(), -1);
  EXPECT_EQ(status.ranks(0).step(), -1);
  EXPECT_EQ(status.steps_per_second(), 0);
}

TEST(JobStatusBoard, EndsErrorsRestartsAndCheckpoints) {
  JobStatusBoard board("job-1", 2);
  board.StartAttempt(0, TwoHostsOfTwo());
  RankEnded killed;
  killed.set_state(RANK_KILLED);
  killed.set_signal(9);
  board.RankFinished(0, 3, killed);
  RankEnded stopped;
  stopped.set_state(RANK_EXITED);
  stopped.set_exit_code(143);
  stopped.set_stopped_by_agent(true);
  board.RankFinished(0, 1, stopped);
  board.AttemptFailed("rank 3 on node-b was killed by signal 9 (SIGKILL)");
  board.SetRestartsUsed(1);
  board.CheckpointCommitted("global_step40");
  const JobStatusReply status = board.Snapshot();
  EXPECT_EQ(status.ranks(3).state(), RANK_KILLED);
  EXPECT_EQ(status.ranks(3).end(), "SIGKILL");
  EXPECT_EQ(status.ranks(1).end(), "exited 143 (stopped)");
  EXPECT_EQ(status.ranks_alive(), 2);
  EXPECT_EQ(status.last_error(), "rank 3 on node-b was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(status.restarts_used(), 1);
  EXPECT_EQ(status.last_checkpoint(), "global_step40");
  EXPECT_GT(status.last_checkpoint_unix_ms(), 0);

  // What `dslaunch status` prints of it.
  const std::string table = FormatJobStatus(status);
  EXPECT_NE(table.find("job job-1: PLANNING, attempt 0, restarts 1 of 2"), std::string::npos) << table;
  EXPECT_NE(table.find("last checkpoint: global_step40, committed 0:00 ago"), std::string::npos) << table;
  EXPECT_NE(table.find("last error: rank 3 on node-b was killed by signal 9 (SIGKILL)"), std::string::npos) << table;
  EXPECT_NE(table.find("2 of 4 rank(s) alive"), std::string::npos) << table;
  EXPECT_NE(table.find("SIGKILL"), std::string::npos) << table;
  EXPECT_NE(FormatJobLine(status).find("2/4 rank(s) alive"), std::string::npos);
}

}  // namespace
}  // namespace dslaunch
