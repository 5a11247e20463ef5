#include "launcher/grpc_agent_client.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "common/auth_token.h"
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

// An agent service served on loopback and a client of it.
class LoopbackAgentTest : public ::testing::Test {
 protected:
  void Serve(Agent::Service* service, const std::string& host) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    client_ = std::make_unique<GrpcAgentClient>(host, "127.0.0.1:" + std::to_string(port), "token", "job-credential",
                                                nullptr, 10s);
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAgentClient> client_;
};

// An AgentBeforeCommonEnv and a client of it ("old-host").
class OldAgentTest : public LoopbackAgentTest {
 protected:
  void SetUp() override { Serve(&service_, "old-host"); }
  AgentBeforeCommonEnv service_;
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

// Note [Agent calls without a thread]: an agent whose event stream and
// keep-alives follow a script, to drive the client's callback calls.
class ScriptedAgent final : public Agent::Service {
 public:
  int events_to_send = 0;       // RankStarted events after `accepted`
  bool end_after_events = true;  // then close the stream (else: wait until cancelled)
  grpc::Status refuse_watch = grpc::Status::OK;

  grpc::Status Watch(grpc::ServerContext* context, const WatchRequest*, grpc::ServerWriter<RankEvent>* writer) override {
    if (!refuse_watch.ok()) return refuse_watch;
    RankEvent accepted;
    accepted.mutable_accepted();
    writer->Write(accepted);
    for (int i = 0; i < events_to_send; ++i) {
      RankEvent event;
      event.mutable_started()->set_pid(i);
      writer->Write(event);
    }
    if (end_after_events) return grpc::Status::OK;
    std::unique_lock<std::mutex> lock(mu_);
    // The sync API has no cancellation callback: look at it between waits.
    while (!context->IsCancelled()) cancelled_.wait_for(lock, 5ms);
    return grpc::Status::CANCELLED;
  }

  grpc::Status KeepAlive(grpc::ServerContext* context, const KeepAliveRequest* request, KeepAliveReply*) override {
    auto job_token = context->client_metadata().find(kJobTokenMetadataKey);
    if (job_token == context->client_metadata().end() || job_token->second != "job-credential") {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no job credential");
    }
    if (request->job_id() != "known") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    return grpc::Status::OK;
  }

 private:
  std::mutex mu_;
  std::condition_variable cancelled_;
};

class CallbackCallsTest : public LoopbackAgentTest {
 protected:
  void Serve() { LoopbackAgentTest::Serve(&agent_, "scripted-host"); }

  ScriptedAgent agent_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<int> ranks_seen_;  // guarded by mu_
  std::vector<absl::Status> lost_;  // guarded by mu_
};

TEST_F(CallbackCallsTest, TheStreamDeliversEveryEventInOrderThenItsEndOnce) {
  agent_.events_to_send = 500;
  Serve();
  WatchRequest request;
  request.set_job_id("known");
  absl::Status watching = client_->StartWatch(
      request,
      [&](RankEvent event) {
        std::lock_guard<std::mutex> lock(mu_);
        ranks_seen_.push_back(static_cast<int>(event.started().pid()));
      },
      [&](absl::Status status) {
        std::lock_guard<std::mutex> lock(mu_);
        lost_.push_back(std::move(status));
        changed_.notify_all();
      });
  ASSERT_TRUE(watching.ok()) << watching;
  std::unique_lock<std::mutex> lock(mu_);
  ASSERT_TRUE(changed_.wait_for(lock, 60s, [&] { return !lost_.empty(); })) << "the stream's end was not reported";
  ASSERT_EQ(ranks_seen_.size(), 500u) << "every event reaches the handler before the end";
  for (int i = 0; i < 500; ++i) ASSERT_EQ(ranks_seen_[i], i) << "in the stream's order";
  EXPECT_THAT(std::string(lost_[0].message()), HasSubstr("agent scripted-host closed the event stream"));
  lock.unlock();
  client_->StopWatch();
  lock.lock();
  EXPECT_EQ(lost_.size(), 1u) << "the end is reported once";
}

TEST_F(CallbackCallsTest, StopWatchEndsTheStreamWithoutReportingItLost) {
  agent_.events_to_send = 3;
  agent_.end_after_events = false;
  Serve();
  WatchRequest request;
  request.set_job_id("known");
  absl::Status watching = client_->StartWatch(
      request,
      [&](RankEvent event) {
        std::lock_guard<std::mutex> lock(mu_);
        ranks_seen_.push_back(static_cast<int>(event.started().pid()));
        changed_.notify_all();
      },
      [&](absl::Status status) {
        std::lock_guard<std::mutex> lock(mu_);
        lost_.push_back(std::move(status));
      });
  ASSERT_TRUE(watching.ok()) << watching;
  {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(changed_.wait_for(lock, 60s, [&] { return ranks_seen_.size() == 3; }));
  }
  client_->StopWatch();  // returns once the stream is over: no handler runs afterwards
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(lost_.empty()) << lost_.front();
  EXPECT_EQ(ranks_seen_.size(), 3u);
}

TEST_F(CallbackCallsTest, AStreamTheAgentRefusesIsAnErrorNamingTheHost) {
  agent_.refuse_watch = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "job bound to another credential");
  Serve();
  WatchRequest request;
  request.set_job_id("known");
  absl::Status watching = client_->StartWatch(
      request, [](RankEvent) {}, [&](absl::Status status) { lost_.push_back(std::move(status)); });
  EXPECT_EQ(watching.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(watching.message()), HasSubstr("agent scripted-host"));
  EXPECT_THAT(std::string(watching.message()), HasSubstr("job bound to another credential"));
  EXPECT_TRUE(lost_.empty()) << "a stream never accepted is not a lost one";
}

TEST_F(CallbackCallsTest, KeepAliveAsyncAnswersOnItsCallbackWithTheCredentials) {
  Serve();
  std::vector<absl::Status> answers(2);
  int answered = 0;
  for (int i = 0; i < 2; ++i) {
    client_->KeepAliveAsync(i == 0 ? "known" : "unknown", [&, i](absl::Status status) {
      std::lock_guard<std::mutex> lock(mu_);
      answers[i] = std::move(status);
      ++answered;
      changed_.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu_);
  ASSERT_TRUE(changed_.wait_for(lock, 60s, [&] { return answered == 2; }));
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  EXPECT_EQ(answers[1].code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(answers[1].message()), HasSubstr("agent scripted-host"));
  EXPECT_THAT(std::string(answers[1].message()), HasSubstr("KeepAlive"));
}

}  // namespace
}  // namespace dslaunch
