#include "agent/ssh_listen_address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

TEST(ListenHostFromSshConnection, IsTheAddressTheConnectionArrivedAt) {
  EXPECT_EQ(*ListenHostFromSshConnection("10.0.0.1 51234 10.0.0.7 22"), "10.0.0.7");
  EXPECT_EQ(*ListenHostFromSshConnection("fe80::1 51234 2001:db8::7 22"), "2001:db8::7");
}

TEST(ListenHostFromSshConnection, RefusesWhatIsNotSshs) {
  EXPECT_THAT(std::string(ListenHostFromSshConnection(nullptr).status().message()),
              HasSubstr("SSH_CONNECTION is not set"));
  EXPECT_THAT(std::string(ListenHostFromSshConnection("10.0.0.1 51234").status().message()),
              HasSubstr("is not 'client_ip client_port server_ip server_port'"));
  EXPECT_THAT(std::string(ListenHostFromSshConnection("a 1 worker-0 22").status().message()),
              HasSubstr("'worker-0' is not an IP address"));
}

}  // namespace
}  // namespace dslaunch
