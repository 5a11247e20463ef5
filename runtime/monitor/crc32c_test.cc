#include "runtime/monitor/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

// The check value of the CRC-32C catalogue and RFC 3720's (iSCSI) vectors.
TEST(Crc32cTest, MatchesPublishedVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheTfRecordConstant) {
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(MaskedCrc32c(""), 0xa282ead8u);
}

}  // namespace
}  // namespace dslaunch::runtime
