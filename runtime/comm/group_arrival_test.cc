// Note [Connected before anyone leaves]: the members' records of their
// rendezvous, through the real rendezvous store: the wait ends when all have
// connected, at once with the name of a member that failed, and at the
// timeout when one never comes.
#include "runtime/comm/group_arrival.h"

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(GroupArrivalTest, TheWaitEndsWhenEveryMemberHasConnected) {
  testing::InProcessStore store{"arrival"};
  StoreClient late = store.Client(0);
  StoreClient waiting = store.Client(0);
  ASSERT_TRUE(RecordGroupArrival(waiting, "comm/g/", 0, absl::OkStatus()).ok());
  std::thread member([&] { EXPECT_TRUE(RecordGroupArrival(late, "comm/g/", 1, absl::OkStatus()).ok()); });
  EXPECT_TRUE(AwaitGroupArrivals(waiting, "comm/g/", 2, std::chrono::minutes(1)).ok());
  member.join();
}

TEST(GroupArrivalTest, AMemberThatFailedIsNamedAtOnce) {
  testing::InProcessStore store{"arrival"};
  StoreClient client = store.Client(0);
  ASSERT_TRUE(RecordGroupArrival(client, "comm/g/", 0, absl::OkStatus()).ok());
  ASSERT_TRUE(RecordGroupArrival(client, "comm/g/", 2, absl::UnavailableError("connect: Connection refused")).ok());
  ASSERT_TRUE(RecordGroupArrival(client, "comm/g/", 1, absl::OkStatus()).ok());
  // A minute's timeout, but the failed record ends the wait.
  const auto began = std::chrono::steady_clock::now();
  const absl::Status arrived = AwaitGroupArrivals(client, "comm/g/", 3, std::chrono::minutes(1));
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(30));
  EXPECT_EQ(arrived.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(arrived.message()),
              HasSubstr("member 2 of the group failed its rendezvous: connect: Connection refused"));
  // Another group's records are its own.
  EXPECT_EQ(AwaitGroupArrivals(client, "comm/other/", 1, std::chrono::milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace dslaunch::runtime
