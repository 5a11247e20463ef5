#include "common/authenticated_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "common/auth_token.h"
#include "common/generic_unary_call.h"
#include "proto/agent.pb.h"

namespace dslaunch {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

// A real implementation of two methods with the Agent service's types; it
// counts the calls that reached it.
class CountingImpl {
 public:
  grpc::Status Describe(grpc::ServerContext*, const DescribeRequest*, DescribeReply* reply) {
    ++calls;
    reply->set_hostname("gated");
    return grpc::Status::OK;
  }
  grpc::Status KeepAlive(grpc::ServerContext*, const KeepAliveRequest*, KeepAliveReply*) {
    ++calls;
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
};

class AuthenticatedServiceTest : public ::testing::Test {
 protected:
  // Serves `policy` with an agent-token check; Describe and KeepAlive bound.
  void Serve(RpcAuthPolicy policy) {
    gate_ = std::make_unique<AuthenticatedService>(
        std::move(policy),
        std::map<RpcCredential, CredentialCheck>{
            {RpcCredential::kAgentToken,
             [](const grpc::ServerContextBase& context, const google::protobuf::Message&) {
               return CallHasToken(context, kToken)
                          ? grpc::Status::OK
                          : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "test: wrong token");
             }}});
    gate_->Unary("/dslaunch.Agent/Describe", &impl_, &CountingImpl::Describe);
    gate_->Unary("/dslaunch.Agent/KeepAlive", &impl_, &CountingImpl::KeepAlive);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    gate_->Serve(builder);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  grpc::Status Call(const std::string& method, const std::string& token) {
    return GenericUnaryCall(channel_, method, token);
  }

  CountingImpl impl_;
  std::unique_ptr<AuthenticatedService> gate_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

RpcAuthPolicy DescribeAndKeepAlive() {
  return RpcAuthPolicy{"test server",
                       {{"/dslaunch.Agent/Describe", RpcCredential::kAgentToken},
                        {"/dslaunch.Agent/KeepAlive", RpcCredential::kNone}}};
}

TEST_F(AuthenticatedServiceTest, ListedMethodRunsOnlyWithItsCredential) {
  Serve(DescribeAndKeepAlive());
  for (const std::string token : {"", "wrong-token-wrong-token-wrong-tok"}) {
    grpc::Status status = Call("/dslaunch.Agent/Describe", token);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_EQ(status.error_message(), "test: wrong token");
  }
  EXPECT_EQ(impl_.calls, 0);  // refused before the handler
  EXPECT_TRUE(Call("/dslaunch.Agent/Describe", kToken).ok());
  EXPECT_EQ(impl_.calls, 1);
}

TEST_F(AuthenticatedServiceTest, CredentialNoneAdmitsEveryCaller) {
  Serve(DescribeAndKeepAlive());
  EXPECT_TRUE(Call("/dslaunch.Agent/KeepAlive", "").ok());
  EXPECT_EQ(impl_.calls, 1);
}

// A method bound to a handler but absent from the table never runs.
TEST_F(AuthenticatedServiceTest, BoundMethodMissingFromTheTableIsRefused) {
  RpcAuthPolicy policy = DescribeAndKeepAlive();
  policy.methods.erase("/dslaunch.Agent/Describe");
  Serve(std::move(policy));
  grpc::Status status = Call("/dslaunch.Agent/Describe", kToken);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(),
            "test server: method /dslaunch.Agent/Describe is not in the authentication table; refused");
  EXPECT_EQ(impl_.calls, 0);
}

// Methods nobody bound (an RPC of a newer proto, the gRPC health service, a
// probe) are refused by name, with or without the token.
TEST_F(AuthenticatedServiceTest, UnboundMethodsAreRefusedByName) {
  Serve(DescribeAndKeepAlive());
  for (const std::string method :
       {"/dslaunch.Agent/StartRanks", "/grpc.health.v1.Health/Check", "/no.Such/Method"}) {
    grpc::Status status = Call(method, kToken);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_EQ(status.error_message(),
              "test server: method " + method + " is not in the authentication table; refused");
  }
  EXPECT_EQ(impl_.calls, 0);
}

// A credential listed in the table that the server has no check for is a
// refusal, never an admission.
TEST_F(AuthenticatedServiceTest, CredentialWithoutACheckFailsClosed) {
  RpcAuthPolicy policy = DescribeAndKeepAlive();
  policy.methods["/dslaunch.Agent/Describe"] = RpcCredential::kRankToken;
  Serve(std::move(policy));
  grpc::Status status = Call("/dslaunch.Agent/Describe", kToken);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("rank token"), std::string::npos) << status.error_message();
  EXPECT_EQ(impl_.calls, 0);
}

}  // namespace
}  // namespace dslaunch
