#include "runtime/topology/process_topology.h"

#include <algorithm>
#include <array>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Groups = std::vector<std::vector<int>>;

ProcessTopology MustCreate(int pipe, int data, int model) {
  auto topo = ProcessTopology::Create(pipe, data, model);
  EXPECT_TRUE(topo.ok()) << topo.status();
  return *topo;
}

TEST(ProcessTopology, LayoutIsPipeDataModelWithModelFastest) {
  ProcessTopology topo = MustCreate(2, 2, 2);
  EXPECT_EQ(topo.world_size(), 8);
  const std::vector<ProcessCoord> expected = {
      {0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(topo.Coordinate(rank), expected[rank]) << "rank " << rank;
    EXPECT_EQ(topo.RankOf(expected[rank]), rank);
  }
}

// The lists DeepSpeed's unit test (test_topology_comm_list) and the
// get_axis_comm_lists docstring give for PipeModelDataParallelTopology(2, 2, 2).
TEST(ProcessTopology, GroupsMatchDeepSpeedFor2x2x2) {
  ProcessTopology topo = MustCreate(2, 2, 2);
  EXPECT_EQ(topo.PipelineGroups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(topo.DataParallelGroups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(topo.ModelParallelGroups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // get_axis_list('data', d): filter_match(pipe=0, data=1) is [2, 3] in the
  // docstring; the whole replica adds pipe 1.
  EXPECT_EQ(topo.ModelPipeGroups(), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

TEST(ProcessTopology, GroupsForUnevenShape) {
  // pipe=2, data=3, model=2: rank = (p * 3 + d) * 2 + m.
  ProcessTopology topo = MustCreate(2, 3, 2);
  EXPECT_EQ(topo.world_size(), 12);
  EXPECT_EQ(topo.DataParallelGroups(),
            (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(topo.ModelParallelGroups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_EQ(topo.PipelineGroups(),
            (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(topo.ModelPipeGroups(), (Groups{{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}));
}

TEST(ProcessTopology, PipeDataOnly) {
  // DeepSpeed's PipeDataParallelTopology(num_pp=3, num_dp=2) has the same ranks
  // as a model axis of size 1.
  ProcessTopology topo = MustCreate(3, 2, 1);
  EXPECT_EQ(topo.DataParallelGroups(), (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(topo.PipelineGroups(), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(topo.ModelParallelGroups(), (Groups{{0}, {1}, {2}, {3}, {4}, {5}}));
}

TEST(ProcessTopology, DocstringTwoAxisExample) {
  // ProcessTopology(axes=['x', 'y'], dims=[2, 3]) with x as pipe, y as model:
  // get_rank(x=0, y=1) == 1, get_axis_list('x', 0) == [0, 1, 2],
  // get_axis_list('y', 0) == [0, 3].
  ProcessTopology topo = MustCreate(2, 1, 3);
  EXPECT_EQ(topo.RankOf({0, 0, 1}), 1);
  EXPECT_EQ(topo.GroupOf(0, Axis::kModel), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(topo.GroupOf(0, Axis::kPipe), (std::vector<int>{0, 3}));
  EXPECT_EQ(topo.Coordinate(1), (ProcessCoord{0, 0, 1}));
}

TEST(ProcessTopology, GroupOfAndIndexInGroup) {
  ProcessTopology topo = MustCreate(2, 2, 2);
  EXPECT_THAT(topo.GroupOf(5, Axis::kData), ElementsAre(5, 7));
  EXPECT_EQ(topo.IndexInGroup(5, Axis::kData), 0);
  EXPECT_THAT(topo.GroupOf(6, Axis::kData), ElementsAre(4, 6));
  EXPECT_EQ(topo.IndexInGroup(6, Axis::kData), 1);
  EXPECT_THAT(topo.GroupOf(6, Axis::kPipe), ElementsAre(2, 6));
  EXPECT_EQ(topo.IndexInGroup(6, Axis::kPipe), 1);
  EXPECT_THAT(topo.GroupOf(6, Axis::kModel), ElementsAre(6, 7));
  EXPECT_EQ(topo.IndexInGroup(6, Axis::kModel), 0);
  EXPECT_THAT(topo.ModelPipeGroupOf(6), ElementsAre(2, 3, 6, 7));
}

// For several shapes: rank <-> coordinate is a bijection, every group is
// sorted, each axis's groups partition the world, GroupOf/IndexInGroup agree
// with Groups, and group sizes are the axis sizes.
TEST(ProcessTopology, BijectionAndPartitionsForManyShapes) {
  const std::vector<std::array<int, 3>> shapes = {
      {1, 1, 1}, {1, 8, 1}, {8, 1, 1}, {1, 1, 8}, {2, 3, 4}, {4, 3, 2}, {3, 5, 2}, {2, 2, 2}};
  for (const auto& [pipe, data, model] : shapes) {
    SCOPED_TRACE(testing::Message() << "pipe=" << pipe << " data=" << data << " model=" << model);
    ProcessTopology topo = MustCreate(pipe, data, model);
    ASSERT_EQ(topo.world_size(), pipe * data * model);
    std::set<int> seen;
    for (int p = 0; p < pipe; ++p) {
      for (int d = 0; d < data; ++d) {
        for (int m = 0; m < model; ++m) {
          const int rank = topo.RankOf({p, d, m});
          EXPECT_EQ(rank, (p * data + d) * model + m);
          EXPECT_EQ(topo.Coordinate(rank), (ProcessCoord{p, d, m}));
          seen.insert(rank);
        }
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), topo.world_size());
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), topo.world_size() - 1);

    for (Axis axis : {Axis::kPipe, Axis::kData, Axis::kModel}) {
      SCOPED_TRACE(AxisName(axis));
      Groups groups = topo.Groups(axis);
      EXPECT_EQ(static_cast<int>(groups.size()), topo.world_size() / topo.size(axis));
      std::vector<int> all;
      for (const auto& group : groups) {
        EXPECT_EQ(static_cast<int>(group.size()), topo.size(axis));
        EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
        for (size_t i = 0; i < group.size(); ++i) {
          EXPECT_EQ(topo.GroupOf(group[i], axis), group);
          EXPECT_EQ(topo.IndexInGroup(group[i], axis), static_cast<int>(i));
        }
        all.insert(all.end(), group.begin(), group.end());
      }
      std::sort(all.begin(), all.end());
      for (int r = 0; r < topo.world_size(); ++r) ASSERT_EQ(all[r], r);
    }
    Groups replicas = topo.ModelPipeGroups();
    ASSERT_EQ(static_cast<int>(replicas.size()), data);
    for (int d = 0; d < data; ++d) {
      EXPECT_EQ(static_cast<int>(replicas[d].size()), pipe * model);
      for (int rank : replicas[d]) {
        EXPECT_EQ(topo.Coordinate(rank).data, d);
        EXPECT_EQ(topo.ModelPipeGroupOf(rank), replicas[d]);
      }
    }
  }
}

TEST(ProcessTopology, CreateRejectsNonPositiveSizes) {
  auto topo = ProcessTopology::Create(0, 2, -1);
  ASSERT_FALSE(topo.ok());
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topo.status().message(), HasSubstr("pipe size must be positive, got 0"));
  EXPECT_THAT(topo.status().message(), HasSubstr("model size must be positive, got -1"));
  EXPECT_THAT(topo.status().message(), testing::Not(HasSubstr("data size")));
}

TEST(ProcessTopology, FromWorldDerivesDataParallelSize) {
  auto topo = ProcessTopology::FromWorld(16, 2, 4);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->model_size(), 2);
  EXPECT_EQ(topo->pipe_size(), 4);
  EXPECT_EQ(topo->data_size(), 2);
  EXPECT_EQ(topo->ToString(), "pipe=4 data=2 model=2");

  auto pure_dp = ProcessTopology::FromWorld(8, 1, 1);
  ASSERT_TRUE(pure_dp.ok());
  EXPECT_EQ(pure_dp->data_size(), 8);
  EXPECT_EQ(pure_dp->DataParallelGroups(), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST(ProcessTopology, FromWorldRejectsIndivisibleWorld) {
  auto topo = ProcessTopology::FromWorld(12, 5, 2);
  ASSERT_FALSE(topo.ok());
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topo.status().message(), HasSubstr("world_size=12"));
  EXPECT_THAT(topo.status().message(), HasSubstr("tp_size=5"));
  EXPECT_THAT(topo.status().message(), HasSubstr("pp_size=2"));
  EXPECT_THAT(topo.status().message(), HasSubstr("(=10)"));

  auto bad = ProcessTopology::FromWorld(8, 0, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tp_size=0"));
}

}  // namespace
}  // namespace dslaunch::runtime
