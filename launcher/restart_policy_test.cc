#include "launcher/restart_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

AttemptReport Ended(int attempt, AttemptEnd end, std::string startup_error = "") {
  AttemptReport report;
  report.attempt = attempt;
  report.end = end;
  report.cause = "rank 0 on node" + std::to_string(attempt) + " failed";
  report.startup_error = std::move(startup_error);
  return report;
}

// A history of `n` attempts that all ended with `end`.
std::vector<AttemptReport> Failures(int n, AttemptEnd end = ATTEMPT_RANK_ERROR) {
  std::vector<AttemptReport> history;
  for (int attempt = 0; attempt < n; ++attempt) history.push_back(Ended(attempt, end));
  return history;
}

TEST(RestartPolicy, BackoffDoublesUpToTheCap) {
  RestartPolicy policy(100, 1000ms, 30000ms);
  EXPECT_EQ(policy.BackoffBefore(1), 1000ms);
  EXPECT_EQ(policy.BackoffBefore(2), 2000ms);
  EXPECT_EQ(policy.BackoffBefore(3), 4000ms);
  EXPECT_EQ(policy.BackoffBefore(5), 16000ms);
  EXPECT_EQ(policy.BackoffBefore(6), 30000ms);  // 32000 capped
  EXPECT_EQ(policy.BackoffBefore(7), 30000ms);
  EXPECT_EQ(policy.BackoffBefore(1000000), 30000ms);  // no overflow
}

TEST(RestartPolicy, ARescaleRestartsAtOnceAndCostsNothing) {
  RestartPolicy policy(1, 1000ms, 30000ms);
  // fail, rescale: the rescale restarts at once, even with the one restart used.
  std::vector<AttemptReport> history = {Ended(0, ATTEMPT_HOST_LOST), Ended(1, ATTEMPT_RESCALED)};
  RestartDecision decision = policy.Decide(history);
  EXPECT_TRUE(decision.restart);
  EXPECT_EQ(decision.backoff, 0ms);
  // fail, rescale, fail: one failure restart used before, so a second would
  // exceed --max_restarts 1; with 2 it waits the second backoff, not the third.
  history.push_back(Ended(2, ATTEMPT_RANK_ERROR));
  EXPECT_FALSE(policy.Decide(history).restart);
  RestartPolicy two(2, 1000ms, 30000ms);
  decision = two.Decide(history);
  EXPECT_TRUE(decision.restart);
  EXPECT_EQ(decision.backoff, 2000ms);
}

TEST(RestartPolicy, CapBelowTheInitialWaitWins) {
  RestartPolicy policy(3, 5000ms, 2000ms);
  EXPECT_EQ(policy.BackoffBefore(1), 2000ms);
  EXPECT_EQ(policy.BackoffBefore(2), 2000ms);
}

TEST(RestartPolicy, ZeroBackoffRestartsAtOnce) {
  RestartPolicy policy(5, 0ms, 30000ms);
  for (int attempt = 1; attempt < 10; ++attempt) EXPECT_EQ(policy.BackoffBefore(attempt), 0ms);
}

TEST(RestartPolicy, DecisionCarriesTheBackoffOfTheNextAttempt) {
  RestartPolicy policy(5, 100ms, 1000ms);
  std::vector<std::chrono::milliseconds> waits;
  for (int n = 1; n <= 5; ++n) {
    RestartDecision decision = policy.Decide(Failures(n));
    ASSERT_TRUE(decision.restart) << n;
    EXPECT_FALSE(decision.early_stop);
    waits.push_back(decision.backoff);
  }
  EXPECT_EQ(waits, (std::vector<std::chrono::milliseconds>{100ms, 200ms, 400ms, 800ms, 1000ms}));
}

TEST(RestartPolicy, BudgetIsJobWide) {
  RestartPolicy policy(2, 0ms, 0ms);
  EXPECT_TRUE(policy.Decide(Failures(1)).restart);
  EXPECT_TRUE(policy.Decide(Failures(2)).restart);
  RestartDecision spent = policy.Decide(Failures(3));
  EXPECT_FALSE(spent.restart);
  EXPECT_FALSE(spent.early_stop);
  EXPECT_EQ(spent.reason, "all 2 restart(s) used");
  EXPECT_EQ(RestartPolicy(0, 0ms, 0ms).Decide(Failures(1)).reason, "--max_restarts is 0");
}

TEST(RestartPolicy, EveryFailureClassIsRestarted) {
  RestartPolicy policy(1, 0ms, 0ms);
  for (AttemptEnd end : {ATTEMPT_STARTUP_FAILURE, ATTEMPT_RANK_ERROR, ATTEMPT_RANK_SIGNALLED,
                         ATTEMPT_HOST_LOST}) {
    EXPECT_TRUE(policy.Decide({Ended(0, end, "boom")}).restart) << AttemptEnd_Name(end);
  }
}

TEST(RestartPolicy, CancelledOrSucceededIsNeverRestarted) {
  RestartPolicy policy(5, 0ms, 0ms);
  RestartDecision cancelled = policy.Decide({Ended(0, ATTEMPT_CANCELLED)});
  EXPECT_FALSE(cancelled.restart);
  EXPECT_EQ(cancelled.reason, "the job was cancelled");
  EXPECT_FALSE(policy.Decide({Ended(0, ATTEMPT_SUCCEEDED)}).restart);
}

TEST(RestartPolicy, RepeatedIdenticalStartupFailureStopsEarly) {
  RestartPolicy policy(5, 0ms, 0ms);
  const std::string missing = "program 'nope' not found in PATH";
  std::vector<AttemptReport> history = {Ended(0, ATTEMPT_STARTUP_FAILURE, missing)};
  EXPECT_TRUE(policy.Decide(history).restart);
  // The second attempt fails the same way, first seen on another rank: the
  // cause names another host but the startup error is the same.
  history.push_back(Ended(1, ATTEMPT_STARTUP_FAILURE, missing));
  RestartDecision decision = policy.Decide(history);
  EXPECT_FALSE(decision.restart);
  EXPECT_TRUE(decision.early_stop);
  EXPECT_EQ(decision.reason,
            "attempt 1 failed to start the same way as attempt 0 (program 'nope' not found in PATH)");
}

TEST(RestartPolicy, DifferentStartupFailuresKeepRestarting) {
  RestartPolicy policy(5, 0ms, 0ms);
  std::vector<AttemptReport> history = {Ended(0, ATTEMPT_STARTUP_FAILURE, "port in use"),
                                        Ended(1, ATTEMPT_STARTUP_FAILURE, "disk full")};
  EXPECT_TRUE(policy.Decide(history).restart);
}

TEST(RestartPolicy, StartupFailureAfterARankErrorKeepsRestarting) {
  RestartPolicy policy(5, 0ms, 0ms);
  AttemptReport rank_error = Ended(0, ATTEMPT_RANK_ERROR);
  rank_error.startup_error = "x";  // only startup failures are compared
  EXPECT_TRUE(policy.Decide({rank_error, Ended(1, ATTEMPT_STARTUP_FAILURE, "x")}).restart);
  // Same error but not consecutive: attempt 1 ran.
  EXPECT_TRUE(policy
                  .Decide({Ended(0, ATTEMPT_STARTUP_FAILURE, "x"), Ended(1, ATTEMPT_RANK_ERROR),
                           Ended(2, ATTEMPT_STARTUP_FAILURE, "x")})
                  .restart);
}

TEST(RestartPolicy, WithoutAStartupErrorTheCauseIsCompared) {
  RestartPolicy policy(5, 0ms, 0ms);
  AttemptReport first = Ended(0, ATTEMPT_STARTUP_FAILURE);
  AttemptReport second = Ended(1, ATTEMPT_STARTUP_FAILURE);
  second.cause = first.cause;
  RestartDecision decision = policy.Decide({first, second});
  EXPECT_TRUE(decision.early_stop);
  EXPECT_THAT(decision.reason, HasSubstr(first.cause));
}

TEST(RestartPolicy, SpentBudgetIsReportedBeforeTheEarlyStop) {
  RestartPolicy policy(1, 0ms, 0ms);
  RestartDecision decision = policy.Decide(
      {Ended(0, ATTEMPT_STARTUP_FAILURE, "x"), Ended(1, ATTEMPT_STARTUP_FAILURE, "x")});
  EXPECT_FALSE(decision.restart);
  EXPECT_FALSE(decision.early_stop);
}

}  // namespace
}  // namespace dslaunch
