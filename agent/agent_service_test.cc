#include "agent/agent_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <map>
#include <set>
#include <thread>

#include "common/auth_token.h"
#include "common/generic_unary_call.h"
#include "common/rpc_auth_policy.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
// Note [Per-job credentials]: what the tests' controller binds its jobs to.
constexpr char kJobCredential[] = "9f8e7d6c5b4a39281706f5e4d3c2b1a0";
constexpr char kOtherJobCredential[] = "a1b2c3d4e5f60718293a4b5c6d7e8f90";

class AgentServiceTest : public ::testing::Test {
 protected:
  void StartAgent(std::chrono::milliseconds lease = 10s, std::vector<RunAsUser> allowed_run_as = {}) {
    AgentConfig config;
    config.allowed_run_as = std::move(allowed_run_as);
    config.token = kToken;
    config.default_lease = lease;
    config.lease_check_interval = 50ms;
    config.lease_stop_grace = 1s;
    config.hostname = "test-host";
    config.keeper_path = DSAGENT_KEEPER_FOR_TESTS;
    service_ = std::make_unique<AgentService>(config);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    service_->Serve(builder);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
    service_->SetRankContactAddress(address_);
    stub_ = Agent::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                               grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
    service_.reset();
  }
  static void Authorize(grpc::ClientContext* context, const std::string& token = kToken,
                        const std::string& job_credential = kJobCredential) {
    AttachToken(context, token);
    if (!job_credential.empty()) AttachJobToken(context, job_credential);
    context->set_deadline(std::chrono::system_clock::now() + 20s);
  }
  StartRanksRequest SleepingRanks(const std::string& job, int count, int64_t lease_ms = 0) {
    StartRanksRequest request;
    request.set_job_id(job);
    request.set_lease_ms(lease_ms);
    for (int r = 0; r < count; ++r) {
      RankSpec* rank = request.add_ranks();
      rank->set_global_rank(r);
      rank->add_argv("/bin/sleep");
      rank->add_argv("1000");
    }
    return request;
  }
  // Waits, bounded, until the job has `live` ranks.
  bool WaitLive(const std::string& job, int live, std::chrono::milliseconds bound = 20s) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (service_->LiveRankCount(job) == live) return true;
      std::this_thread::yield();
    }
    return service_->LiveRankCount(job) == live;
  }

  // A Watch of `job`, its first event read (`accepted`, unless the agent
  // refused: then reader is null and the test fails here).
  struct OpenedWatch {
    std::unique_ptr<grpc::ClientContext> context;  // outlives the reader
    std::unique_ptr<grpc::ClientReader<RankEvent>> reader;
    RankEvent first;
  };
  OpenedWatch OpenWatch(const std::string& job) {
    OpenedWatch opened;
    opened.context = std::make_unique<grpc::ClientContext>();
    Authorize(opened.context.get());
    WatchRequest request;
    request.set_job_id(job);
    opened.reader = stub_->Watch(opened.context.get(), request);
    if (!opened.reader->Read(&opened.first)) {
      ADD_FAILURE() << "the Watch of " << job << " ended before its first event";
      opened.reader.reset();
    }
    return opened;
  }

  std::string address_;
  std::unique_ptr<AgentService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Agent::Stub> stub_;
};

TEST_F(AgentServiceTest, RefusesCallsWithoutTheToken) {
  StartAgent();
  for (const std::string& token : {std::string(""), std::string("wrong-token-wrong-token")}) {
    grpc::ClientContext context;
    if (!token.empty()) AttachToken(&context, token);
    StartRanksReply reply;
    grpc::Status status = stub_->StartRanks(&context, SleepingRanks("intruder", 1), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(service_->LiveRankCount("intruder"), 0);  // nothing ran
  grpc::ClientContext context;
  ReservePortReply port;
  EXPECT_EQ(stub_->ReservePort(&context, ReservePortRequest(), &port).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// Note [One authentication gate]: every method of the table, called without
// or with a wrong credential, is refused before it runs; a method the table
// does not list is refused by name.
TEST_F(AgentServiceTest, EveryListedMethodRefusesAMissingOrWrongToken) {
  StartAgent();
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  const RpcAuthPolicy policy = AgentAuthPolicy();
  ASSERT_FALSE(policy.methods.empty());
  for (const auto& [method, credential] : policy.methods) {
    for (const std::string token : {"", "wrong-token-wrong-token-wrong-tok"}) {
      grpc::Status status = GenericUnaryCall(channel, method, token);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " token '" << token << "'";
      EXPECT_EQ(status.error_message(),
                credential == RpcCredential::kRankToken
                    ? "dsagent: heartbeat for an unknown rank or with a wrong rank token"
                    : "dsagent: missing or wrong token; check --token_file on both sides")
          << method;
    }
  }
  // Note [Per-job credentials]: the agent token alone opens no call about a job.
  for (const auto& [method, credential] : policy.methods) {
    if (credential != RpcCredential::kAgentAndJobToken) continue;
    grpc::Status status = GenericUnaryCall(channel, method, kToken);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
    EXPECT_NE(status.error_message().find("needs the job's own credential in x-dslaunch-job-token"),
              std::string::npos)
        << method << ": " << status.error_message();
  }
  // The agent token is not a rank token: Heartbeat still refuses it.
  EXPECT_EQ(GenericUnaryCall(channel, "/dslaunch.Agent/Heartbeat", kToken).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(GenericUnaryCall(channel, "/dslaunch.Agent/Describe", kToken).ok());
}

TEST_F(AgentServiceTest, UnlistedMethodsAreRefusedByName) {
  StartAgent();
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  for (const std::string method : {"/dslaunch.Agent/RunAnything", "/grpc.health.v1.Health/Check",
                                   "/dslaunch.Store/Set"}) {
    grpc::Status status = GenericUnaryCall(channel, method, kToken);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_EQ(status.error_message(),
              "dsagent: method " + method + " is not in the authentication table; refused");
  }
}

TEST_F(AgentServiceTest, WatchStreamsEveryEventOfTheJob) {
  StartAgent();
  OpenedWatch watch = OpenWatch("job-a");
  ASSERT_TRUE(watch.reader != nullptr);
  auto& reader = watch.reader;
  RankEvent event = watch.first;
  EXPECT_TRUE(event.has_accepted());

  StartRanksRequest request;
  request.set_job_id("job-a");
  request.set_attempt(2);
  RankSpec* rank = request.add_ranks();
  rank->set_global_rank(4);
  rank->add_argv("/bin/sh");
  rank->add_argv("-c");
  rank->add_argv("echo hi; exit 3");
  grpc::ClientContext start_context;
  Authorize(&start_context);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&start_context, request, &reply).ok());
  ASSERT_EQ(reply.pids_size(), 1);
  EXPECT_GT(reply.pids(0), 0);

  std::vector<RankEvent> seen;
  while (reader->Read(&event)) {
    seen.push_back(event);
    if (event.has_ended()) break;
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen[0].has_started());
  EXPECT_EQ(seen[1].output().line(), "hi");
  EXPECT_EQ(seen[2].ended().exit_code(), 3);
  for (const auto& e : seen) {
    EXPECT_EQ(e.attempt(), 2);
    EXPECT_EQ(e.global_rank(), 4);
  }
  watch.context->TryCancel();
}

// Note [Environment once per node]: the request's common_env reaches every
// rank, under the rank's own env.
// Note [Ranks as another user]: a job may name only a user the agent allows;
// any other is refused before the job is bound or a rank starts.
TEST_F(AgentServiceTest, AJobMayRunItsRanksOnlyAsAnAllowedUser) {
  RunAsUser allowed;
  allowed.name = "trainee";
  allowed.uid = 4242;
  allowed.gid = 4242;
  StartAgent(10s, {allowed});
  for (const char* asked : {"root", "4243", "trainee2"}) {
    StartRanksRequest request = SleepingRanks("job-user", 2);
    request.set_run_as(asked);
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    const grpc::Status status = stub_->StartRanks(&context, request, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << asked;
    EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("'", asked, "'")));
    EXPECT_THAT(status.error_message(), HasSubstr("--allow_run_as: trainee"));
    EXPECT_EQ(reply.pids_size(), 0);
    EXPECT_EQ(service_->LiveRankCount("job-user"), 0) << asked;
  }
  // Refused before the job was bound: another controller may take the id.
  StartRanksRequest request = SleepingRanks("job-user", 0);
  grpc::ClientContext context;
  Authorize(&context, kToken, kOtherJobCredential);
  StartRanksReply reply;
  EXPECT_TRUE(stub_->StartRanks(&context, request, &reply).ok());
}

TEST(RunAsUserTest, AllowedUsersAreFoundByNameOrUid) {
  RunAsUser a, b;
  a.name = "alice";
  a.uid = 1001;
  b.name = "bob";
  b.uid = 1002;
  const std::vector<RunAsUser> allowed = {a, b};
  EXPECT_EQ(AllowedRunAsUser(allowed, "bob"), &allowed[1]);
  EXPECT_EQ(AllowedRunAsUser(allowed, "1001"), &allowed[0]);
  EXPECT_EQ(AllowedRunAsUser(allowed, "carol"), nullptr);
  EXPECT_EQ(AllowedRunAsUser(allowed, "1003"), nullptr);
  EXPECT_EQ(AllowedRunAsUser({}, "alice"), nullptr);
  EXPECT_EQ(AllowedRunAsUser(allowed, ""), nullptr);
}

TEST_F(AgentServiceTest, RanksGetTheCommonEnvironmentUnderTheirOwn) {
  StartAgent();
  OpenedWatch watch = OpenWatch("job-env");
  ASSERT_TRUE(watch.reader != nullptr);
  auto& reader = watch.reader;
  RankEvent event = watch.first;
  ASSERT_TRUE(event.has_accepted());

  StartRanksRequest request;
  request.set_job_id("job-env");
  (*request.mutable_common_env())["WORLD_SIZE"] = "2";
  (*request.mutable_common_env())["RANK"] = "shared";
  for (int r = 0; r < 2; ++r) {
    RankSpec* rank = request.add_ranks();
    rank->set_global_rank(r);
    (*rank->mutable_env())["RANK"] = std::to_string(r);
    for (const char* arg : {"/bin/sh", "-c", "echo \"$RANK of $WORLD_SIZE\""}) rank->add_argv(arg);
  }
  grpc::ClientContext context;
  Authorize(&context);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&context, request, &reply).ok());
  EXPECT_TRUE(reply.common_env_applied());
  std::set<std::string> lines;
  int ended = 0;
  while (ended < 2 && reader->Read(&event)) {
    if (event.has_output()) lines.insert(event.output().line());
    if (event.has_ended()) ++ended;
  }
  EXPECT_EQ(lines, (std::set<std::string>{"0 of 2", "1 of 2"}));
  watch.context->TryCancel();
}

// Note [Rank heartbeats]: a rank that prints its agent contact and then sleeps.
TEST_F(AgentServiceTest, HeartbeatsReachTheWatcherAndSilenceIsReported) {
  StartAgent();
  StartRanksRequest request;
  request.set_job_id("beating");
  request.set_attempt(1);
  request.set_heartbeat_timeout_ms(300);
  RankSpec* rank = request.add_ranks();
  rank->set_global_rank(0);
  for (const char* arg : {"/bin/sh", "-c", "echo \"$DSLAUNCH_AGENT_ADDR $DSLAUNCH_RANK_TOKEN\"; exec sleep 1000"}) {
    rank->add_argv(arg);
  }
  OpenedWatch watch = OpenWatch("beating");
  ASSERT_TRUE(watch.reader != nullptr);
  auto& reader = watch.reader;
  RankEvent event = watch.first;
  ASSERT_TRUE(event.has_accepted());
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, request, &reply).ok());
  }
  std::string contact;
  while (contact.empty() && reader->Read(&event)) {
    if (event.has_output()) contact = event.output().line();
  }
  const size_t space = contact.find(' ');
  ASSERT_NE(space, std::string::npos) << contact;
  EXPECT_EQ(contact.substr(0, space), address_);
  const std::string rank_token = contact.substr(space + 1);
  ASSERT_EQ(rank_token.size(), 64u);  // its own token, not the agent's
  EXPECT_NE(rank_token, kToken);

  HeartbeatRequest beat;
  beat.set_job_id("beating");
  beat.set_attempt(1);
  beat.set_global_rank(0);
  beat.set_step(7);
  beat.add_recent_collectives()->set_seq(3);
  beat.mutable_metrics()->set_total_steps(100);
  beat.mutable_metrics()->set_loss(2.5);
  beat.set_rank_token("not-the-rank-token");
  {
    grpc::ClientContext context;
    HeartbeatReply reply;
    EXPECT_EQ(stub_->Heartbeat(&context, beat, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  beat.set_rank_token(rank_token);
  {
    grpc::ClientContext context;
    HeartbeatReply reply;
    ASSERT_TRUE(stub_->Heartbeat(&context, beat, &reply).ok());
  }
  // Forwarded as it came, then (no second beat within 300 ms) reported missing.
  std::vector<RankProgress> progress;
  while (progress.size() < 2 && reader->Read(&event)) {
    if (event.has_progress()) progress.push_back(event.progress());
  }
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress[0].step(), 7);
  EXPECT_EQ(progress[0].recent_collectives(0).seq(), 3);
  EXPECT_EQ(progress[0].missed_heartbeat_ms(), 0);
  EXPECT_EQ(progress[0].metrics().total_steps(), 100);  // the figures for `dslaunch status`
  EXPECT_EQ(progress[0].metrics().loss(), 2.5);
  EXPECT_GT(progress[1].missed_heartbeat_ms(), 300);
  EXPECT_EQ(progress[1].step(), 7);

  // The agent's own report (its /metrics): the rank, its last beat and its age.
  std::vector<AgentJobReport> report = service_->Report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].job_id, "beating");
  EXPECT_EQ(report[0].lease_seconds, 10);
  ASSERT_EQ(report[0].ranks.size(), 1u);
  EXPECT_EQ(report[0].ranks[0].attempt, 1);
  const RankStatus& reported = report[0].ranks[0].status;
  EXPECT_EQ(reported.host(), "test-host");
  EXPECT_EQ(reported.state(), RANK_RUNNING);
  EXPECT_GT(reported.pid(), 0);
  EXPECT_EQ(reported.step(), 7);
  EXPECT_GE(reported.heartbeat_age_ms(), 300);
  EXPECT_EQ(reported.metrics().loss(), 2.5);

  // Diagnose: the live rank's native stacks (eu-stack) and its last heartbeat.
  grpc::ClientContext context;
  Authorize(&context);
  DiagnoseRequest diagnose;
  diagnose.set_job_id("beating");
  diagnose.set_attempt(1);
  DiagnoseReply diagnosis;
  ASSERT_TRUE(stub_->Diagnose(&context, diagnose, &diagnosis).ok());
  ASSERT_EQ(diagnosis.ranks_size(), 1);
  EXPECT_GT(diagnosis.ranks(0).pid(), 0);
  EXPECT_EQ(diagnosis.ranks(0).last_heartbeat().step(), 7);
  EXPECT_GE(diagnosis.ranks(0).heartbeat_age_ms(), 300);
  EXPECT_NE(diagnosis.ranks(0).stacks().find("TID"), std::string::npos) << diagnosis.ranks(0).stacks();
  EXPECT_NE(diagnosis.ranks(0).stacks().find("sleep"), std::string::npos) << diagnosis.ranks(0).stacks();
  // Note [Rank keeper]: the rank's own stacks, not its keeper's.
  EXPECT_EQ(diagnosis.ranks(0).stacks().find("dsagent_keeper"), std::string::npos)
      << diagnosis.ranks(0).stacks();
  watch.context->TryCancel();
}

TEST_F(AgentServiceTest, StopJobTouchesOnlyThatJob) {
  StartAgent();
  EXPECT_TRUE(service_->Report().empty());
  for (const char* job : {"job-1", "job-2"}) {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks(job, 2), &reply).ok());
  }
  EXPECT_EQ(service_->LiveRankCount("job-1"), 2);
  grpc::ClientContext context;
  Authorize(&context);
  StopJobRequest stop;
  stop.set_job_id("job-1");
  stop.set_attempt(-1);
  stop.set_grace_ms(5000);
  StopJobReply reply;
  ASSERT_TRUE(stub_->StopJob(&context, stop, &reply).ok());
  EXPECT_EQ(reply.signalled(), 2);
  EXPECT_TRUE(WaitLive("job-1", 0));
  EXPECT_EQ(service_->LiveRankCount("job-2"), 2);
  // The report says how each rank stands: ended by the stop's SIGTERM, or running.
  std::map<std::string, std::multiset<RankState>> states;
  for (const AgentJobReport& job : service_->Report()) {
    for (const AgentJobReport::Rank& rank : job.ranks) states[job.job_id].insert(rank.status.state());
  }
  EXPECT_EQ(states["job-1"], std::multiset<RankState>({RANK_KILLED, RANK_KILLED}));
  EXPECT_EQ(states["job-2"], std::multiset<RankState>({RANK_RUNNING, RANK_RUNNING}));
}

// Note [Per-job credentials]: a job is bound to the credential of the first
// call that names it. With the agent token but another job's credential, a
// weak one or none, nothing about it works: no stop, no watch, no diagnosis,
// no keep-alive, no further ranks; its ranks live on. Its own credential
// still works, and the other credential's job is untouched by it.
TEST_F(AgentServiceTest, AJobAnswersOnlyToItsOwnCredential) {
  StartAgent();
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("owned", 2), &reply).ok());
  }
  {
    grpc::ClientContext context;
    Authorize(&context, kToken, kOtherJobCredential);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("other", 1), &reply).ok());
  }
  const std::string weak(40, 'a');
  for (const std::string& credential : {std::string(kOtherJobCredential), weak, std::string()}) {
    const grpc::StatusCode expected =
        credential == kOtherJobCredential ? grpc::StatusCode::PERMISSION_DENIED : grpc::StatusCode::UNAUTHENTICATED;
    SCOPED_TRACE(credential.empty() ? "no job credential" : credential);
    {
      grpc::ClientContext context;
      Authorize(&context, kToken, credential);
      StopJobRequest stop;
      stop.set_job_id("owned");
      stop.set_attempt(-1);
      StopJobReply reply;
      grpc::Status status = stub_->StopJob(&context, stop, &reply);
      EXPECT_EQ(status.error_code(), expected) << status.error_message();
      if (expected == grpc::StatusCode::PERMISSION_DENIED) {
        EXPECT_EQ(status.error_message(),
                  "dsagent: job owned belongs to another controller: the call's job credential is not the one the "
                  "job was started with (does another dslaunch run with --job_id owned?)");
      }
    }
    {
      grpc::ClientContext context;
      Authorize(&context, kToken, credential);
      WatchRequest watch;
      watch.set_job_id("owned");
      auto reader = stub_->Watch(&context, watch);
      RankEvent event;
      EXPECT_FALSE(reader->Read(&event));
      EXPECT_EQ(reader->Finish().error_code(), expected);
    }
    {
      grpc::ClientContext context;
      Authorize(&context, kToken, credential);
      DiagnoseRequest diagnose;
      diagnose.set_job_id("owned");
      DiagnoseReply reply;
      EXPECT_EQ(stub_->Diagnose(&context, diagnose, &reply).error_code(), expected);
    }
    {
      grpc::ClientContext context;
      Authorize(&context, kToken, credential);
      KeepAliveRequest keep;
      keep.set_job_id("owned");
      KeepAliveReply reply;
      EXPECT_EQ(stub_->KeepAlive(&context, keep, &reply).error_code(), expected);
    }
    {
      grpc::ClientContext context;
      Authorize(&context, kToken, credential);
      StartRanksRequest more = SleepingRanks("owned", 1);
      more.set_attempt(7);
      StartRanksReply reply;
      EXPECT_EQ(stub_->StartRanks(&context, more, &reply).error_code(), expected);
    }
  }
  EXPECT_EQ(service_->LiveRankCount("owned"), 2);
  // The owner's credential stops its own job and only that.
  grpc::ClientContext context;
  Authorize(&context);
  StopJobRequest stop;
  stop.set_job_id("owned");
  stop.set_attempt(-1);
  StopJobReply reply;
  ASSERT_TRUE(stub_->StopJob(&context, stop, &reply).ok());
  EXPECT_EQ(reply.signalled(), 2);
  EXPECT_TRUE(WaitLive("owned", 0));
  EXPECT_EQ(service_->LiveRankCount("other"), 1);
  // Over (no live rank, no watcher): a new controller may rerun the id at
  // once; the job it starts is its own, and the old credential is refused.
  {
    grpc::ClientContext again;
    Authorize(&again, kToken, kOtherJobCredential);
    StartRanksReply started;
    ASSERT_TRUE(stub_->StartRanks(&again, SleepingRanks("owned", 1), &started).ok());
  }
  EXPECT_EQ(service_->LiveRankCount("owned"), 1);
  grpc::ClientContext old;
  Authorize(&old);
  StopJobReply none;
  EXPECT_EQ(stub_->StopJob(&old, stop, &none).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(service_->LiveRankCount("owned"), 1);
}

TEST_F(AgentServiceTest, LeaseExpiryStopsRanksOfASilentController) {
  StartAgent();
  grpc::ClientContext context;
  Authorize(&context);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("silent", 2, /*lease_ms=*/300), &reply).ok());
  ASSERT_EQ(service_->LiveRankCount("silent"), 2);
  // No KeepAlive: the lease runs out and the agent stops the ranks by itself.
  EXPECT_TRUE(WaitLive("silent", 0, 20s));
}

// Note [Honest exits]: a stopped rank's RankEnded says who stopped it and why.
TEST_F(AgentServiceTest, StoppedRanksReportWhoStoppedThem) {
  StartAgent();
  OpenedWatch watch = OpenWatch("victim");
  ASSERT_TRUE(watch.reader != nullptr);
  auto& reader = watch.reader;
  RankEvent event = watch.first;
  ASSERT_TRUE(event.has_accepted());
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("victim", 1), &reply).ok());
  }
  grpc::ClientContext context;
  Authorize(&context);
  StopJobRequest stop;
  stop.set_job_id("victim");
  stop.set_attempt(-1);
  stop.set_grace_ms(5000);
  stop.set_reason("operator cleanup");
  stop.set_requester("ops-tool pid 77 on console");
  StopJobReply stopped;
  ASSERT_TRUE(stub_->StopJob(&context, stop, &stopped).ok());
  while (reader->Read(&event) && !event.has_ended()) {
  }
  ASSERT_TRUE(event.has_ended());
  EXPECT_TRUE(event.ended().stopped_by_agent());
  EXPECT_EQ(event.ended().stop_reason(), STOP_REQUESTED);
  EXPECT_EQ(event.ended().stop_detail().rfind("StopJob from ops-tool pid 77 on console (ipv4:127.0.0.1:", 0), 0u)
      << event.ended().stop_detail();
  EXPECT_NE(event.ended().stop_detail().find("): operator cleanup"), std::string::npos) << event.ended().stop_detail();
  watch.context->TryCancel();
}

TEST_F(AgentServiceTest, ALeaseExpiryReportsHowLongTheControllerWasSilent) {
  StartAgent();
  OpenedWatch watch = OpenWatch("orphaned");
  ASSERT_TRUE(watch.reader != nullptr);
  auto& reader = watch.reader;
  RankEvent event = watch.first;
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("orphaned", 1, /*lease_ms=*/600), &reply).ok());
  }
  while (reader->Read(&event) && !event.has_ended()) {
  }
  ASSERT_TRUE(event.has_ended());
  EXPECT_EQ(event.ended().stop_reason(), STOP_LEASE_EXPIRED);
  EXPECT_GE(event.ended().controller_silent_ms(), 600);  // the lease expires at 600 ms, not after it
  EXPECT_NE(event.ended().stop_detail().find("no word from the controller for "), std::string::npos);
  EXPECT_NE(event.ended().stop_detail().find(" ms (lease 600 ms)"), std::string::npos) << event.ended().stop_detail();
  watch.context->TryCancel();
}

TEST_F(AgentServiceTest, RefusesDurationsAboveTheirBounds) {
  StartAgent();
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    grpc::Status status = stub_->StartRanks(&context, SleepingRanks("long", 1, /*lease_ms=*/86400001), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("lease_ms 86400001 is above the bound of 86400000 ms"), std::string::npos);
  }
  EXPECT_EQ(service_->LiveRankCount("long"), 0);
  grpc::ClientContext context;
  Authorize(&context);
  StopJobRequest stop;
  stop.set_job_id("long");
  stop.set_grace_ms(9223372036854);
  StopJobReply reply;
  grpc::Status status = stub_->StopJob(&context, stop, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("grace_ms 9223372036854 is above the bound of 3600000 ms"), std::string::npos);
}

TEST_F(AgentServiceTest, KeepAliveHoldsTheLease) {
  StartAgent();
  grpc::ClientContext context;
  Authorize(&context);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("alive", 1, /*lease_ms=*/1000), &reply).ok());
  // Keep it alive for three leases.
  auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    grpc::ClientContext keep;
    Authorize(&keep);
    KeepAliveRequest request;
    request.set_job_id("alive");
    KeepAliveReply keep_reply;
    ASSERT_TRUE(stub_->KeepAlive(&keep, request, &keep_reply).ok());
    EXPECT_EQ(service_->LiveRankCount("alive"), 1);
    std::this_thread::sleep_for(100ms);  // the keep-alive period itself, not a wait for an event
  }
  EXPECT_EQ(service_->LiveRankCount("alive"), 1);
}

TEST_F(AgentServiceTest, ANewWatcherReplacesTheOldOne) {
  // After a partition the controller reconnects before the agent noticed the
  // old stream died: the newest watcher gets the events, the old stream ends.
  StartAgent();
  WatchRequest watch;
  watch.set_job_id("rewatched");
  grpc::ClientContext first_context;
  Authorize(&first_context);
  auto first = stub_->Watch(&first_context, watch);
  RankEvent event;
  ASSERT_TRUE(first->Read(&event));
  ASSERT_TRUE(event.has_accepted());
  grpc::ClientContext second_context;
  Authorize(&second_context);
  auto second = stub_->Watch(&second_context, watch);
  ASSERT_TRUE(second->Read(&event));
  ASSERT_TRUE(event.has_accepted());
  EXPECT_FALSE(first->Read(&event));  // ends once superseded
  EXPECT_TRUE(first->Finish().ok());
  grpc::ClientContext context;
  Authorize(&context);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&context, SleepingRanks("rewatched", 1), &reply).ok());
  ASSERT_TRUE(second->Read(&event));
  EXPECT_TRUE(event.has_started());
  second_context.TryCancel();
}

// Note [Controller failover]: a controller that takes over after the old one
// died asks for a replay and learns every start and end of the newest
// attempt exactly once, whether the old stream had taken it from the queue,
// it still waited there, or it happens afterwards.
TEST_F(AgentServiceTest, AReplayTellsEachStartAndEndOfTheNewestAttemptOnce) {
  StartAgent();
  WatchRequest watch;
  watch.set_job_id("taken-over");
  grpc::ClientContext first_context;
  Authorize(&first_context);
  auto first = stub_->Watch(&first_context, watch);
  RankEvent event;
  ASSERT_TRUE(first->Read(&event));
  ASSERT_TRUE(event.has_accepted());
  // Attempt 0 ends before attempt 1 starts: the replay leaves it out.
  StartRanksRequest old_attempt = SleepingRanks("taken-over", 1);
  old_attempt.set_attempt(0);
  old_attempt.mutable_ranks(0)->clear_argv();
  for (const char* arg : {"/bin/sh", "-c", "exit 0"}) old_attempt.mutable_ranks(0)->add_argv(arg);
  {
    grpc::ClientContext context;
    Authorize(&context);
    StartRanksReply reply;
    ASSERT_TRUE(stub_->StartRanks(&context, old_attempt, &reply).ok());
  }
  ASSERT_TRUE(WaitLive("taken-over", 0));
  StartRanksRequest request;
  request.set_job_id("taken-over");
  request.set_attempt(1);
  const char* scripts[] = {"echo zero; exit 5", "echo one; exec sleep 30"};
  for (int rank = 0; rank < 2; ++rank) {
    RankSpec* spec = request.add_ranks();
    spec->set_global_rank(rank);
    for (const char* arg : {"/bin/sh", "-c", scripts[rank]}) spec->add_argv(arg);
  }
  StartRanksReply started;
  {
    grpc::ClientContext context;
    Authorize(&context);
    ASSERT_TRUE(stub_->StartRanks(&context, request, &started).ok());
  }
  // The first controller reads one event and dies.
  ASSERT_TRUE(first->Read(&event));
  first_context.TryCancel();

  watch.set_replay(true);
  watch.set_replay_from_attempt(1);
  grpc::ClientContext second_context;
  Authorize(&second_context);
  auto second = stub_->Watch(&second_context, watch);
  ASSERT_TRUE(second->Read(&event));
  ASSERT_TRUE(event.has_accepted());
  std::map<int, int64_t> pids;
  std::map<int, int> starts, ends;
  bool stopped = false;
  while (second->Read(&event)) {
    EXPECT_EQ(event.attempt(), 1) << event.ShortDebugString();
    if (event.has_started()) {
      ++starts[event.global_rank()];
      pids[event.global_rank()] = event.started().pid();
    }
    if (event.has_ended()) {
      ++ends[event.global_rank()];
      if (event.global_rank() == 1) break;
      EXPECT_EQ(event.ended().exit_code(), 5);
    }
    if (!stopped && ends[0] == 1 && starts[1] == 1) {
      stopped = true;
      grpc::ClientContext context;
      Authorize(&context);
      StopJobRequest stop;
      stop.set_job_id("taken-over");
      stop.set_attempt(-1);
      stop.set_grace_ms(1000);
      StopJobReply reply;
      ASSERT_TRUE(stub_->StopJob(&context, stop, &reply).ok());
    }
  }
  EXPECT_EQ(starts, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(ends, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(pids, (std::map<int, int64_t>{{0, started.pids(0)}, {1, started.pids(1)}}));
  second_context.TryCancel();
}

TEST_F(AgentServiceTest, RefusesASecondStartOfTheSameAttempt) {
  StartAgent();
  grpc::ClientContext first;
  Authorize(&first);
  StartRanksReply reply;
  ASSERT_TRUE(stub_->StartRanks(&first, SleepingRanks("twice", 1), &reply).ok());
  grpc::ClientContext second;
  Authorize(&second);
  EXPECT_EQ(stub_->StartRanks(&second, SleepingRanks("twice", 1), &reply).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
}

}  // namespace
}  // namespace dslaunch
