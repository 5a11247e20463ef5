#include "agent/rank_state.h"

#include "gtest/gtest.h"

namespace dslaunch {
namespace {

TEST(RankLifecycle, NormalRunEndsExited) {
  RankLifecycle rank;
  EXPECT_EQ(rank.state(), RANK_SPAWNING);
  ASSERT_TRUE(rank.Transition(RANK_RUNNING).ok());
  ASSERT_TRUE(rank.Transition(RANK_EXITED).ok());
  EXPECT_TRUE(rank.IsFinal());
}

TEST(RankLifecycle, SpawnFailureIsLost) {
  RankLifecycle rank;
  ASSERT_TRUE(rank.Transition(RANK_LOST).ok());
  EXPECT_TRUE(rank.IsFinal());
}

TEST(RankLifecycle, RefusesEdgesNotInTheDiagram) {
  RankLifecycle spawning;
  EXPECT_FALSE(spawning.Transition(RANK_EXITED).ok());  // must run first
  EXPECT_FALSE(spawning.Transition(RANK_KILLED).ok());
  EXPECT_EQ(spawning.state(), RANK_SPAWNING);

  RankLifecycle running;
  ASSERT_TRUE(running.Transition(RANK_RUNNING).ok());
  EXPECT_FALSE(running.Transition(RANK_LOST).ok());
  EXPECT_FALSE(running.Transition(RANK_SPAWNING).ok());
  ASSERT_TRUE(running.Transition(RANK_KILLED).ok());
  absl::Status again = running.Transition(RANK_RUNNING);  // final is final
  EXPECT_FALSE(again.ok());
  EXPECT_NE(std::string(again.message()).find("RANK_KILLED"), std::string::npos);
}

}  // namespace
}  // namespace dslaunch
