#include "runtime/topology/process_groups.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Groups = std::vector<std::vector<int>>;

Groups MembersOf(const std::vector<PlannedGroup>& plan, GroupKind kind) {
  Groups groups;
  for (const PlannedGroup& group : plan) {
    if (group.kind == kind) groups.push_back(group.members);
  }
  return groups;
}

// pipe=2 data=2 model=2, the layout of Note [Topology layout]; the lists are
// what DeepSpeed's PipeModelDataParallelTopology(2, 2, 2) and its grid give.
TEST(ProcessGroupsTest, WorldEightAsPipeTwoDataTwoModelTwo) {
  auto topology = TopologyFor(8, ParallelSizes{.tensor = 2, .pipeline = 2, .expert = 1});
  ASSERT_TRUE(topology.ok()) << topology.status();
  const std::vector<PlannedGroup> plan = PlanProcessGroups(*topology, 1);
  EXPECT_EQ(MembersOf(plan, GroupKind::kWorld), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kData), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kTensor), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kPipeline), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kModelParallel), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // Expert size 1: each rank holds every expert; expert-data = data.
  EXPECT_EQ(MembersOf(plan, GroupKind::kExpert), (Groups{{0}, {2}, {1}, {3}, {4}, {6}, {5}, {7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kExpertData), MembersOf(plan, GroupKind::kData));
}

TEST(ProcessGroupsTest, ExpertGroupsCutEachDataGroupAsDeepSpeedDoes) {
  auto topology = TopologyFor(8, ParallelSizes{.expert = 4});
  ASSERT_TRUE(topology.ok()) << topology.status();
  const std::vector<PlannedGroup> plan = PlanProcessGroups(*topology, 4);
  EXPECT_EQ(MembersOf(plan, GroupKind::kExpert), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(MembersOf(plan, GroupKind::kExpertData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));

  // With tensor parallelism the cut is within each data group.
  auto with_tp = TopologyFor(8, ParallelSizes{.tensor = 2, .expert = 2});
  ASSERT_TRUE(with_tp.ok()) << with_tp.status();
  const std::vector<PlannedGroup> tp_plan = PlanProcessGroups(*with_tp, 2);
  EXPECT_EQ(MembersOf(tp_plan, GroupKind::kData), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(MembersOf(tp_plan, GroupKind::kExpert), (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(MembersOf(tp_plan, GroupKind::kExpertData), (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
}

TEST(ProcessGroupsTest, EveryRankIsInExactlyOneGroupOfEachKind) {
  for (const ParallelSizes sizes : {ParallelSizes{}, ParallelSizes{2, 2, 1}, ParallelSizes{1, 2, 2},
                                    ParallelSizes{2, 1, 4}, ParallelSizes{8, 1, 1}}) {
    auto topology = TopologyFor(16, sizes);
    ASSERT_TRUE(topology.ok()) << topology.status();
    const std::vector<PlannedGroup> plan = PlanProcessGroups(*topology, sizes.expert);
    std::map<std::string, int> names;
    for (const PlannedGroup& group : plan) ++names[group.name];
    for (const auto& [name, count] : names) EXPECT_EQ(count, 1) << name;
    for (int rank = 0; rank < 16; ++rank) {
      std::map<GroupKind, int> kinds;
      for (const PlannedGroup& group : GroupsOfRank(plan, rank)) ++kinds[group.kind];
      EXPECT_EQ(kinds.size(), 7u) << "rank " << rank;
      for (const auto& [kind, count] : kinds) EXPECT_EQ(count, 1) << GroupKindName(kind) << " rank " << rank;
    }
  }
}

TEST(ProcessGroupsTest, RefusesSizesThatDoNotDivideTheWorld) {
  EXPECT_THAT(TopologyFor(8, ParallelSizes{.tensor = 3}).status().message(), HasSubstr("3"));
  auto expert = TopologyFor(8, ParallelSizes{.tensor = 2, .expert = 3});
  ASSERT_FALSE(expert.ok());
  EXPECT_THAT(expert.status().message(),
              HasSubstr("the expert-parallel size 3 must be positive and divide the data-parallel size 4"));
}

TEST(ProcessGroupsTest, NamesAreKindAndIndex) {
  auto topology = TopologyFor(4, ParallelSizes{.tensor = 2});
  ASSERT_TRUE(topology.ok());
  std::vector<std::string> names;
  for (const PlannedGroup& group : GroupsOfRank(PlanProcessGroups(*topology, 1), 3)) names.push_back(group.name);
  EXPECT_THAT(names, ElementsAre("world", "data.1", "tensor.1", "pipe.3", "model_parallel.1", "expert.3",
                                 "expert_data.1"));
}

}  // namespace
}  // namespace dslaunch::runtime
