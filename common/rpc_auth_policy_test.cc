#include "common/rpc_auth_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/agent.pb.h"
#include "proto/controller.pb.h"
#include "proto/store.pb.h"

namespace dslaunch {
namespace {

const google::protobuf::ServiceDescriptor& ServiceOf(const google::protobuf::Descriptor& message,
                                                     const std::string& name) {
  const google::protobuf::ServiceDescriptor* service = message.file()->FindServiceByName(name);
  EXPECT_NE(service, nullptr) << name;
  return *service;
}

// Note [One authentication gate]: a new RPC in agent.proto without a line in
// the table fails here.
TEST(RpcAuthPolicy, AgentTableCoversEveryMethodOfTheAgentService) {
  const auto& agent = ServiceOf(*DescribeRequest::descriptor(), "Agent");
  EXPECT_THAT(AgentAuthPolicy().Unlisted(agent), ::testing::IsEmpty());
  // And lists nothing the service lacks (a renamed RPC leaves no stale line).
  EXPECT_EQ(AgentAuthPolicy().methods.size(), static_cast<size_t>(agent.method_count()));
}

TEST(RpcAuthPolicy, ControllerTableCoversEveryMethodOfTheControllerService) {
  const auto& controller = ServiceOf(*JobStatusRequest::descriptor(), "Controller");
  EXPECT_THAT(ControllerAuthPolicy().Unlisted(controller), ::testing::IsEmpty());
  EXPECT_EQ(ControllerAuthPolicy().methods.size(), static_cast<size_t>(controller.method_count()));
  for (const auto& [method, credential] : ControllerAuthPolicy().methods) {
    EXPECT_EQ(credential, RpcCredential::kControllerToken) << method;
  }
}

TEST(RpcAuthPolicy, StoreTableCoversEveryMethodOfTheStoreService) {
  const auto& store = ServiceOf(*StoreSetRequest::descriptor(), "Store");
  EXPECT_THAT(StoreAuthPolicy().Unlisted(store), ::testing::IsEmpty());
  EXPECT_EQ(StoreAuthPolicy().methods.size(), static_cast<size_t>(store.method_count()));
}

// The coverage check can fail: a table missing a method names it.
TEST(RpcAuthPolicy, UnlistedNamesAMethodMissingFromTheTable) {
  RpcAuthPolicy policy = AgentAuthPolicy();
  policy.methods.erase("/dslaunch.Agent/Diagnose");
  EXPECT_THAT(policy.Unlisted(ServiceOf(*DescribeRequest::descriptor(), "Agent")),
              ::testing::ElementsAre("/dslaunch.Agent/Diagnose"));
}

TEST(RpcAuthPolicy, CredentialsOfTheAgentAndTheStore) {
  const RpcAuthPolicy agent = AgentAuthPolicy();
  ASSERT_NE(agent.Find("/dslaunch.Agent/StartRanks"), nullptr);
  EXPECT_EQ(*agent.Find("/dslaunch.Agent/StartRanks"), RpcCredential::kAgentToken);
  ASSERT_NE(agent.Find("/dslaunch.Agent/Heartbeat"), nullptr);
  EXPECT_EQ(*agent.Find("/dslaunch.Agent/Heartbeat"), RpcCredential::kRankToken);
  EXPECT_EQ(agent.Find("/dslaunch.Store/Set"), nullptr);  // exact full names only
  EXPECT_EQ(agent.Find("StartRanks"), nullptr);
  for (const auto& [method, credential] : StoreAuthPolicy().methods) {
    EXPECT_EQ(credential, RpcCredential::kStoreToken) << method;
  }
}

}  // namespace
}  // namespace dslaunch
