// JobController, Note [Rank heartbeats]: hang detection from the ranks'
// steps, the hang report naming the lagging rank, missed heartbeats.
#include "launcher/job_controller_test_fixture.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace dslaunch::controller_testing {
namespace {

TEST_F(JobControllerTest, NoProgressIsAHang) {
  spec_.hang_timeout = 100ms;
  spec_.read_progress = [](int) { return std::optional<std::string>("step 7"); };  // never moves
  JobOutcome outcome = Run();
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("no training progress for"));
  EXPECT_THAT(outcome.attempts[0].cause, HasSubstr("(last: step 7)"));
  EXPECT_EQ(a_.stops().size(), 1u);
}

TEST_F(JobControllerTest, NoProgressMarkerYetIsNotAHang) {
  spec_.hang_timeout = 50ms;
  spec_.read_progress = [](int) { return std::optional<std::string>(); };  // still starting up
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    std::this_thread::sleep_for(200ms);  // four timeouts without a marker: the thing under test
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  // ... but the user learns that the timeout is not armed, once.
  const std::string notices = Notices();
  EXPECT_THAT(notices, HasSubstr("no rank has reported a training step in the 50 ms of --hang_timeout_ms: hang "
                                 "detection is armed by the first report and is not armed yet"));
  EXPECT_EQ(notices.find("not armed yet"), notices.rfind("not armed yet"));
}

TEST_F(JobControllerTest, TimeDslaunchSpentFrozenIsNoHang) {
  // Note [Honest exits]: the progress clock restarts when dslaunch runs
  // again. The recorded freeze ends a minute from now, so for the whole test
  // the ranks' unchanged marker is never older than the timeout.
  spec_.hang_timeout = 100ms;
  spec_.read_progress = [](int) { return std::optional<std::string>("step 7"); };
  const auto now = std::chrono::steady_clock::now();
  freezes_->Record(FreezeWatch::Freeze{now, now + 60s});
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    std::this_thread::sleep_for(400ms);  // four hang timeouts: the thing under test
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
}

// A heartbeat at `step` whose newest collective is #seq (finished or not).
RankProgress Beat(int64_t step, int64_t seq, bool finished) {
  RankProgress progress;
  progress.set_step(step);
  CollectiveRecord* call = progress.add_recent_collectives();
  call->set_seq(seq);
  call->set_op("all_reduce");
  call->set_completed(finished);
  return progress;
}

TEST_F(JobControllerTest, HangDiagnosisNamesTheLaggingRankAndWritesStacks) {
  const std::string dir = ::testing::TempDir() + "/hang-diagnosis-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  spec_.hang_timeout = 100ms;
  spec_.diagnosis_dir = dir;
  a_.stacks_text = "#0 nanosleep (host-a)";
  b_.stacks_text = "#0 gloo::allreduce (host-b)";
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    // Rank 1 stopped before collective #5; the others wait in it. Steps stay put.
    a_.Heartbeat(0, 0, Beat(4, 5, false));
    a_.Heartbeat(0, 1, Beat(4, 4, true));
    b_.Heartbeat(0, 2, Beat(4, 5, false));
    b_.Heartbeat(0, 3, Beat(4, 5, false));
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  const std::string& cause = outcome.attempts[0].cause;
  EXPECT_THAT(cause, HasSubstr("(last: steps 4,4,4,4)"));
  EXPECT_THAT(cause, HasSubstr("rank 1 (host-a) is behind: newest collective #4 (all_reduce, finished) while "
                               "ranks 0 (host-a), 2 (host-b), 3 (host-b) wait in #5 (all_reduce)"));
  EXPECT_THAT(cause, HasSubstr("stacks and recent collectives of 4 rank(s) in " + dir + "/attempt_0/diagnosis"));
  EXPECT_EQ(a_.diagnose_calls(), 1);
  EXPECT_EQ(b_.diagnose_calls(), 1);
  std::ifstream file(dir + "/attempt_0/diagnosis/rank_2.txt");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("rank 2 on host-b, pid 1002"));
  EXPECT_THAT(text, HasSubstr("#0 gloo::allreduce (host-b)"));
  EXPECT_THAT(text, HasSubstr("#5 all_reduce 0 B"));
  std::filesystem::remove_all(dir);
}

TEST_F(JobControllerTest, AdvancingStepsAreNotAHang) {
  spec_.hang_timeout = 500ms;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    // Every rank advances one step per 40 ms for 40 steps: 1.6 s in all,
    // three hang timeouts, none of them without progress.
    for (int step = 0; step < 40; ++step) {
      for (int rank : {0, 1}) a_.Heartbeat(0, rank, Beat(step, step + 1, true));
      for (int rank : {2, 3}) b_.Heartbeat(0, rank, Beat(step, step + 1, true));
      std::this_thread::sleep_for(40ms);
    }
    for (int rank : {0, 1}) a_.EndRank(0, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(0, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED) << Notices();
  EXPECT_EQ(a_.diagnose_calls(), 0);
}

TEST_F(JobControllerTest, AMissedHeartbeatFailsTheAttemptAsAHang) {
  spec_.heartbeat_timeout = 3s;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    RankProgress missed = Beat(6, 12, true);
    missed.set_missed_heartbeat_ms(3200);
    b_.Heartbeat(0, 3, missed);
  });
  EXPECT_EQ(outcome.state, JOB_FAILED);
  ASSERT_EQ(outcome.attempts.size(), 1u);
  EXPECT_EQ(outcome.attempts[0].end, ATTEMPT_HANG);
  EXPECT_THAT(outcome.attempts[0].cause,
              HasSubstr("rank 3 on host-b sent no heartbeat for 3200 ms while its process lives"));
  EXPECT_EQ(b_.starts().front().heartbeat_timeout_ms(), 3000);  // the agents watch with the job's bound
}

// Note [Live job status]: what `dslaunch status` and /metrics show follows
// the job as the controller sees it: ranks and pids, heartbeats with their
// figures, the cause of a failed attempt, the restart, the end.
TEST_F(JobControllerTest, TheStatusBoardFollowsTheJob) {
  JobStatusBoard board(spec_.job_id, 1);
  board_ = &board;
  spec_.max_restarts = 1;
  JobOutcome outcome = Run([this](JobController&) {
    ASSERT_TRUE(WaitStarted(0));
    // Every rank's start (with its pid) on the board before the checks:
    // WaitStarted sees the start requests, not the started events, which
    // reach the board through the controller's queue (a CI run once read
    // rank 2's pid as 0 at step 3).
    ASSERT_TRUE(WaitForStatus([](const JobStatusReply& s) {
      return s.ranks_size() == 4 && std::all_of(s.ranks().begin(), s.ranks().end(),
                                                [](const RankStatus& r) { return r.state() == RANK_RUNNING; });
    }));
    RankProgress progress;
    progress.set_step(3);
    progress.mutable_metrics()->set_total_steps(10);
    progress.mutable_metrics()->set_loss(2.25);
    for (int rank : {0, 1}) a_.Heartbeat(0, rank, progress);
    for (int rank : {2, 3}) b_.Heartbeat(0, rank, progress);
    ASSERT_TRUE(WaitForStatus([](const JobStatusReply& s) { return s.step() == 3; }));
    JobStatusReply status = board_->Snapshot();
    EXPECT_EQ(status.state(), JOB_RUNNING);
    EXPECT_EQ(status.total_steps(), 10);
    EXPECT_EQ(status.ranks(2).host(), "host-b");
    EXPECT_EQ(status.ranks(2).pid(), 1002);
    EXPECT_EQ(status.ranks(2).metrics().loss(), 2.25);
    EXPECT_GE(status.ranks(2).heartbeat_age_ms(), 0);

    b_.EndRank(0, 3, Exited(7));
    ASSERT_TRUE(WaitStarted(1));
    ASSERT_TRUE(WaitForStatus([](const JobStatusReply& s) { return s.attempt() == 1 && s.state() == JOB_RUNNING; }));
    status = board_->Snapshot();
    EXPECT_EQ(status.restarts_used(), 1);
    EXPECT_EQ(status.last_error(), "rank 3 on host-b exited with code 7");
    EXPECT_EQ(status.step(), -1);  // the new attempt has reported no step
    EXPECT_EQ(status.ranks_alive(), 4);
    for (int rank : {0, 1}) a_.EndRank(1, rank, Exited(0));
    for (int rank : {2, 3}) b_.EndRank(1, rank, Exited(0));
  });
  EXPECT_EQ(outcome.state, JOB_SUCCEEDED);
  const JobStatusReply status = board.Snapshot();
  EXPECT_EQ(status.state(), JOB_SUCCEEDED);
  EXPECT_EQ(status.ranks_alive(), 0);
  EXPECT_EQ(status.ranks(0).end(), "exited 0");
}

}  // namespace
}  // namespace dslaunch::controller_testing
