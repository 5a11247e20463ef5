// AgentClient over gRPC, with the cluster token on every call and the job's
// own credential on every call about the job (Note [Per-job credentials],
// common/rpc_auth_policy.h).
// Thread-safe except StartWatch/StopWatch, which the controller calls from
// one thread.
//
// Note [Agent calls without a thread]
// A controller of 1,000 hosts holds an event stream to each agent for the
// whole job and keeps each one alive every quarter of the lease. Served by
// a blocked thread each (a stream reader and a KeepAlive loop per agent),
// that was over 2,000 threads whose wake-ups and switches were most of the
// controller's CPU at 8,000 ranks (scripts/control-plane-scale.sh). Both now
// run on gRPC's callback API: the stream is a read reactor whose reads are
// handed to the handler from gRPC's completion threads, one read at a time,
// and KeepAliveAsync is a callback call; the controller keeps every agent
// alive from one thread (JobController::KeepAliveLoop). The short calls
// stay blocking: Describe 64 at a time (common/for_each_concurrently.h);
// StartRanks, StopJob and Diagnose on a short-lived thread per agent while
// they run (at launch, at a stop, at a hang).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>

#include "common/control_plane_defaults.h"
#include "launcher/agent_client.h"
#include "proto/agent.grpc.pb.h"

namespace dslaunch {

class GrpcAgentClient final : public AgentClient {
 public:
  // `address` is host:port of the agent; `host` is the name shown to users;
  // `job_credential` is what this controller's job is bound to on the agent
  // (empty for a client that only calls Describe).
  // The connection is pinged every `keepalive` and declared dead when a ping
  // goes unanswered for twice as long: a lost host is noticed within
  // 3 × keepalive (dslaunch uses a quarter of the lease, so within three
  // quarters of it).
  // `credentials`: TLS for an agent started with --tls_dir (Note [Mutual
  // TLS]); null: plaintext.
  GrpcAgentClient(std::string host, const std::string& address, std::string token, std::string job_credential,
                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                  std::chrono::milliseconds call_timeout = std::chrono::milliseconds(kDefaultAgentCallTimeoutMs),
                  std::chrono::milliseconds keepalive = std::chrono::milliseconds(2000));
  ~GrpcAgentClient() override;

  const std::string& host() const override { return host_; }
  absl::StatusOr<DescribeReply> Describe() override;
  absl::StatusOr<int> ReservePort() override;
  absl::Status StartRanks(const StartRanksRequest& request) override;
  absl::Status StopJob(const std::string& job_id, int attempt, std::chrono::milliseconds grace,
                       const std::string& reason) override;
  absl::Status KeepAlive(const std::string& job_id) override;
  void KeepAliveAsync(const std::string& job_id, std::function<void(absl::Status)> done) override;
  absl::StatusOr<DiagnoseReply> Diagnose(const std::string& job_id, int attempt) override;
  absl::Status StartWatch(const WatchRequest& request, EventHandler on_event,
                          LostHandler on_lost) override;
  void StopWatch() override;

  // StartRanks answers once every rank of the request was exec'd: its deadline
  // is the call timeout plus kStartAllowancePerRank for each rank (10 s + 102 s
  // for 1,024 ranks), so a big host is not cut off at a fixed 10 s. An idle
  // 2-core machine starts a rank (keeper and exec) in ~2 ms; under load
  // (2 cores, busy loops and builds beside) 1,024 ranks took over 30 s, past
  // the 20 ms a rank this was before (test_big_host's flake).
  static constexpr std::chrono::milliseconds kStartAllowancePerRank{100};
  static std::chrono::milliseconds StartRanksDeadline(std::chrono::milliseconds call_timeout,
                                                      int ranks);

 private:
  // Both credentials and the call timeout.
  void Prepare(grpc::ClientContext* context) const;
  void AttachCredentials(grpc::ClientContext* context) const;
  absl::Status Annotate(const grpc::Status& status, const char* method) const;

  const std::string host_;
  const std::string address_;
  const std::string token_;
  const std::string job_credential_;
  // Sent with every StopJob ("dslaunch pid P on HOST"): the ranks it stops
  // report it, so a StopJob is never anonymous (Note [Honest exits]).
  const std::string requester_;
  const std::chrono::milliseconds call_timeout_;
  std::unique_ptr<Agent::Stub> stub_;

  // The event stream, a read reactor (grpc_agent_client.cc).
  class WatchCall;
  std::unique_ptr<WatchCall> watch_;  // StartWatch/StopWatch's thread only

  // KeepAliveAsync calls not yet over: the destructor waits for them, so no
  // callback outlives the client (its channel, its host name).
  std::mutex async_mu_;
  std::condition_variable async_changed_;
  int async_calls_ = 0;  // guarded by async_mu_
};

}  // namespace dslaunch
