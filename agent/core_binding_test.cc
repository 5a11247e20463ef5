#include "agent/core_binding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CoreBinding, EachRankGetsItsShareInOrderWithItsNumaNode) {
  // Two NUMA nodes of four cores; three ranks over cores 0-7: two each, 6-7 unused.
  const std::map<int, std::vector<int>> nodes = {{0, {0, 1, 2, 3}}, {1, {4, 5, 6, 7}}};
  auto split = SplitCoresAmongRanks({0, 1, 2, 3, 4, 5, 6, 7}, 3, nodes, "host-a");
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), 3u);
  EXPECT_THAT((*split)[0].cores, ElementsAre(0, 1));
  EXPECT_THAT((*split)[1].cores, ElementsAre(2, 3));
  EXPECT_THAT((*split)[2].cores, ElementsAre(4, 5));
  EXPECT_EQ((*split)[0].numa_node, 0);
  EXPECT_EQ((*split)[2].numa_node, 1);
  // A share across two nodes binds no memory.
  split = SplitCoresAmongRanks({2, 3, 4, 5}, 1, nodes, "host-a");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ((*split)[0].numa_node, -1);
}

TEST(CoreBinding, TooFewCoresAreRefusedNamingTheHost) {
  auto split = SplitCoresAmongRanks({0, 1}, 4, {}, "host-b");
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(std::string(split.status().message()),
              HasSubstr("host host-b has 2 core(s) to bind (0-1) for 4 rank(s)"));
}

TEST(CoreBinding, ThisProcessHasCoresAndTheyAreInItsNodes) {
  const std::vector<int> mine = AffinityCores();
  ASSERT_FALSE(mine.empty());
  for (const auto& [node, cores] : NumaNodeCores()) EXPECT_FALSE(cores.empty()) << node;
}

}  // namespace
}  // namespace dslaunch
