#include "runtime/config/pipeline_chunks.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

TEST(PipelineChunksTest, LayersPerVirtualStageGiveTheChunksAndTheirCounts) {
  // 8 blocks, 2 stages, 2 blocks per chunk: 2 chunks per stage.
  auto cut = VirtualStagesOfBlocks(8, 2, 2);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->virtual_stages, 2);
  EXPECT_EQ(cut->layers_per_part, (std::vector<int>{3, 2, 2, 3}));
  auto uneven = VirtualStagesOfBlocks(8, 3, 1);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.status().message(),
            "pipeline.num_layers_per_virtual_stage=1: the model's 8 blocks do not split into 3 stages x 1 blocks per "
            "model chunk");
  auto one = VirtualStagesOfBlocks(8, 2, 4);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("gives one model chunk per stage"), std::string::npos) << one.status();
}

}  // namespace
}  // namespace dslaunch::runtime
