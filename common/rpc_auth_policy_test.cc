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

// Note [Per-job credentials]: every agent call whose request names a job,
// except a rank's Heartbeat, needs that job's credential; a new RPC about a
// job that is listed with the agent token alone fails here.
TEST(RpcAuthPolicy, EveryCallAboutAJobNeedsItsCredential) {
  const auto& agent = ServiceOf(*DescribeRequest::descriptor(), "Agent");
  const RpcAuthPolicy policy = AgentAuthPolicy();
  int per_job = 0;
  for (int i = 0; i < agent.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *agent.method(i);
    const std::string full = "/" + agent.full_name() + "/" + method.name();
    ASSERT_NE(policy.Find(full), nullptr) << full;
    const bool names_a_job = method.input_type()->FindFieldByName("job_id") != nullptr;
    if (method.name() == "Heartbeat") {
      EXPECT_EQ(*policy.Find(full), RpcCredential::kRankToken);
    } else if (names_a_job) {
      EXPECT_EQ(*policy.Find(full), RpcCredential::kAgentAndJobToken) << full;
      ++per_job;
    } else {
      EXPECT_EQ(*policy.Find(full), RpcCredential::kAgentToken) << full;
    }
  }
  EXPECT_EQ(per_job, 5);
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
  EXPECT_EQ(*agent.Find("/dslaunch.Agent/StartRanks"), RpcCredential::kAgentAndJobToken);
  ASSERT_NE(agent.Find("/dslaunch.Agent/Describe"), nullptr);
  EXPECT_EQ(*agent.Find("/dslaunch.Agent/Describe"), RpcCredential::kAgentToken);
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
