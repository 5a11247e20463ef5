#include "common/core_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CoreList, ParsesDeepSpeedsSyntax) {
  auto cores = ParseCoreList("1,3-5,7", "--bind_core_list");
  ASSERT_TRUE(cores.ok()) << cores.status();
  EXPECT_THAT(*cores, ElementsAre(1, 3, 4, 5, 7));
  cores = ParseCoreList(" 7, 0-1,1 \n", "cpulist");  // a sysfs cpulist, duplicates folded
  ASSERT_TRUE(cores.ok()) << cores.status();
  EXPECT_THAT(*cores, ElementsAre(0, 1, 7));
  EXPECT_EQ(FormatCoreList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST(CoreList, RefusesWhatIsNoCoreNamingTheFlag) {
  for (const char* bad : {"", "a", "3-1", "-1", "1,,2", "1-", "70000"}) {
    auto cores = ParseCoreList(bad, "--bind_core_list");
    ASSERT_FALSE(cores.ok()) << bad;
    EXPECT_THAT(std::string(cores.status().message()), HasSubstr("--bind_core_list: '")) << bad;
  }
}

}  // namespace
}  // namespace dslaunch
