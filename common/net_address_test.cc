#include "common/net_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

TEST(NetAddress, ParsesHostPortForms) {
  auto v4 = ParseHostPort("10.0.0.2:29500", "--agents");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "10.0.0.2");
  EXPECT_EQ(v4->port, 29500);
  auto name = ParseHostPort("worker-1:0", "--agents");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->port, 0);
  auto v6 = ParseHostPort("[::1]:80", "--agents");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:80");
}

TEST(NetAddress, BadFormsNameTheFlagAndText) {
  for (const char* bad : {"worker-1", ":80", "host:http", "host:70000", "[::1]80"}) {
    auto parsed = ParseHostPort(bad, "--agents");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--agents")) << bad;
  }
}

TEST(NetAddress, PicksAPortThatCanBeBound) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
}

TEST(NetAddress, LocalAddressTowardLoopbackIsLoopback) {
  auto local = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(IsLoopbackHost(*local)) << *local;
  EXPECT_FALSE(LocalAddressToward("no-such-host.invalid").ok());
}

}  // namespace
}  // namespace dslaunch
