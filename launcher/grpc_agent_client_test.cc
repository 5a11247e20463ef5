#include "launcher/grpc_agent_client.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(GrpcAgentClient, StartRanksDeadlineGrowsWithTheRanks) {
  EXPECT_EQ(GrpcAgentClient::StartRanksDeadline(10s, 1), 10s + GrpcAgentClient::kStartAllowancePerRank);
  EXPECT_EQ(GrpcAgentClient::StartRanksDeadline(10s, 1024), 10s + 1024 * 100ms);
}

// An agent from before StartRanksRequest.common_env: it answers without
// common_env_applied (it never heard of the field).
class AgentBeforeCommonEnv final : public Agent::Service {
 public:
  grpc::Status StartRanks(grpc::ServerContext*, const StartRanksRequest* request,
                          StartRanksReply* reply) override {
    for (int i = 0; i < request->ranks_size(); ++i) reply->add_pids(100 + i);
    return grpc::Status::OK;
  }
};

// An AgentBeforeCommonEnv served on loopback and a client of it ("old-host").
class OldAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    client_ = std::make_unique<GrpcAgentClient>("old-host", "127.0.0.1:" + std::to_string(port), "token",
                                                "job-credential", nullptr, 10s);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  AgentBeforeCommonEnv service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAgentClient> client_;
};

TEST_F(OldAgentTest, RefusesAnAgentThatIgnoresTheCommonEnvironment) {
  GrpcAgentClient& client = *client_;

  StartRanksRequest request;
  request.set_job_id("job");
  request.add_ranks()->set_global_rank(0);
  EXPECT_TRUE(client.StartRanks(request).ok());  // nothing shared: nothing lost
  (*request.mutable_common_env())["WORLD_SIZE"] = "1";
  absl::Status refused = client.StartRanks(request);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("agent old-host"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("older than this dslaunch"));
}

// Note [Ranks as another user]: an agent that never heard of run_as started
// the ranks as its own user; dslaunch must not take that for the user asked.
TEST_F(OldAgentTest, RefusesAnAgentThatIgnoresRunAs) {
  GrpcAgentClient& client = *client_;
  StartRanksRequest request;
  request.set_job_id("job");
  request.add_ranks()->set_global_rank(0);
  request.set_run_as("nobody");
  absl::Status refused = client.StartRanks(request);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("ignored --run_as nobody"));
}

}  // namespace
}  // namespace dslaunch
