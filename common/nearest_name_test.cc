#include "common/nearest_name.h"

#include <gtest/gtest.h>

namespace dslaunch {
namespace {

TEST(NearestName, EditDistanceCountsSwapsAndIgnoresCase) {
  EXPECT_EQ(EditDistance("device", "device"), 0);
  EXPECT_EQ(EditDistance("devcie", "device"), 1);  // neighbours swapped
  EXPECT_EQ(EditDistance("DEVICE", "device"), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
}

TEST(NearestName, SuggestsOnlyWhatLooksLikeATypo) {
  const std::vector<std::string> names = {"--device", "--num_gpus", "--num_nodes", "--hostfile"};
  EXPECT_EQ(NearestName("--devicex", names), "--device");
  EXPECT_EQ(NearestName("--num_gpu", names), "--num_gpus");
  EXPECT_EQ(NearestName("--hostfle", names), "--hostfile");
  EXPECT_EQ(NearestName("--nproc_per_node", names), "");
  EXPECT_EQ(NearestName("z", {"x"}), "");  // one edit, but the whole name
}

}  // namespace
}  // namespace dslaunch
