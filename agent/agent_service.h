// The dsagent gRPC service: starts, watches and stops the ranks of jobs on
// this host for an authenticated controller.
//
// Jobs are isolated by id: every rank belongs to exactly one job, and
// StopJob or a lease expiry only ever signals that job's process groups.
//
// Lease: a controller proves it is alive with KeepAlive (and any other call
// for the job). When a job with running ranks hears nothing for its lease, the
// agent stops those ranks: a SIGKILLed or partitioned controller never leaves
// ranks behind. Jobs whose ranks have all ended are forgotten after a lease
// without contact.
//
// Note [Rank heartbeats]: every rank gets the agent's address and a token of
// its own. A rank (dsrank, or a program using common/heartbeat_client.h)
// reports its step and recent collectives every DSLAUNCH_HEARTBEAT_MS; the
// agent forwards each report to the controller's Watch stream and reports a
// rank that went quiet for longer than the job's heartbeat timeout while its
// process lives (frozen, stopped, swapping). A program that never sends one is
// judged by its process state only. Diagnose adds every thread's native stack
// (eu-stack from elfutils) to the last report, for the controller's hang
// report.
//
// Every RPC passes the authentication gate first (Note [One authentication
// gate], common/rpc_auth_policy.h): the controller's calls carry the agent
// token, and those about a job that job's own credential too (Note [Per-job
// credentials]); a rank's Heartbeat carries its own rank token.
//
// Thread-safe: gRPC calls it from many threads.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/rank_supervisor.h"
#include "agent/run_as_user.h"
#include "common/authenticated_service.h"
#include "common/blocking_queue.h"
#include "common/control_plane_defaults.h"
#include "proto/agent.grpc.pb.h"
#include "proto/controller.pb.h"

namespace dslaunch {

struct AgentConfig {
  std::string token;                                // required on every call
  std::chrono::milliseconds default_lease{kDefaultLeaseMs};  // when StartRanks gives none
  std::chrono::milliseconds lease_check_interval{200};
  std::chrono::milliseconds lease_stop_grace{kDefaultStopGraceMs};  // SIGTERM -> SIGKILL when a lease expires
  std::string hostname;                             // reported by Describe
  int gpu_count = 0;                                // reported by Describe
  std::string keeper_path;  // dsagent_keeper, every rank's keeper (Note [Rank keeper])
  std::string tls_dir;      // Note [Mutual TLS]: given to ranks as DSLAUNCH_TLS_DIR; empty: none
  std::optional<RunAsUser> run_as;  // Note [Ranks as another user]; nullopt: ranks run as the agent
  // Note [Ranks as another user]: the users a job may ask for
  // (StartRanksRequest.run_as; dsagent --allow_run_as).
  std::vector<RunAsUser> allowed_run_as;
};

// What an agent knows of one job, for its /metrics (agent/agent_metrics.h).
struct AgentJobReport {
  std::string job_id;
  double seconds_since_controller_contact = 0;
  double lease_seconds = 0;
  struct Rank {
    int attempt = 0;
    RankStatus status;  // host, global rank, state, pid, step, heartbeat age, metrics
  };
  std::vector<Rank> ranks;
};

class AgentService final {
 public:
  explicit AgentService(AgentConfig config);
  // Stops every rank of every job (SIGKILL) and joins the lease thread.
  ~AgentService();

  // Registers the service, behind its authentication gate, with `builder`.
  void Serve(grpc::ServerBuilder& builder);
  // OK, or why the gate refuses this call of `full_method`
  // ("/dslaunch.Agent/StopJob") before its handler runs (tests, fuzzers).
  grpc::Status Admit(const std::string& full_method, const grpc::ServerContextBase& context,
                     const google::protobuf::Message& request) const {
    return gate_.Admit(full_method, context, request);
  }

  // The RPCs of proto/agent.proto; only the gate calls them.

  grpc::Status Describe(grpc::ServerContext* context, const DescribeRequest* request,
                        DescribeReply* reply);
  grpc::Status ReservePort(grpc::ServerContext* context, const ReservePortRequest* request,
                           ReservePortReply* reply);
  grpc::Status StartRanks(grpc::ServerContext* context, const StartRanksRequest* request,
                          StartRanksReply* reply);
  grpc::Status StopJob(grpc::ServerContext* context, const StopJobRequest* request,
                       StopJobReply* reply);
  grpc::Status KeepAlive(grpc::ServerContext* context, const KeepAliveRequest* request,
                         KeepAliveReply* reply);
  grpc::Status Watch(grpc::ServerContext* context, const WatchRequest* request,
                     grpc::ServerWriter<RankEvent>* writer);
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatReply* reply);
  grpc::Status Diagnose(grpc::ServerContext* context, const DiagnoseRequest* request,
                        DiagnoseReply* reply);

  // Where ranks of this host send heartbeats (host:port of this service);
  // set once the server listens, before it takes calls. Ranks get it as
  // DSLAUNCH_AGENT_ADDR with their own DSLAUNCH_RANK_TOKEN.
  void SetRankContactAddress(const std::string& address);

  // Stops every job's ranks with `grace` and waits until they are gone
  // (daemon shutdown; the ranks' RankEnded say STOP_AGENT_SHUTDOWN and
  // `reason`). Returns how many ranks were signalled.
  int StopAllJobs(std::chrono::milliseconds grace, const std::string& reason);

  // Every job this agent knows and its ranks, as of now.
  std::vector<AgentJobReport> Report();

  // Number of ranks of `job_id` that have not ended (tests).
  int LiveRankCount(const std::string& job_id);

 private:
  // Note [Rank heartbeats]: what the agent knows of a rank's own reports.
  struct RankHealth {
    std::string token;  // DSLAUNCH_RANK_TOKEN of this rank
    std::chrono::steady_clock::time_point last;  // of the last heartbeat
    bool reported = false;                       // has sent at least one
    bool missed_reported = false;                // this silence was reported
    RankProgress progress;                       // the last heartbeat's content
  };

  struct Job {
    Job(std::string id, std::string credential) : id(std::move(id)), credential(std::move(credential)) {}
    const std::string id;
    const std::string credential;  // Note [Per-job credentials]: bound by the first call for the job
    // Everything that happened, for the watcher: each watcher reads a queue
    // of its own (Note [Controller failover]).
    std::shared_ptr<BlockingQueue<RankEvent>> events = std::make_shared<BlockingQueue<RankEvent>>();  // guarded by mu
    bool events_closed = false;  // the agent stops: no more events; guarded by mu
    std::mutex mu;
    std::vector<std::unique_ptr<RankSupervisor>> ranks;  // guarded by mu
    std::chrono::steady_clock::time_point last_contact;  // guarded by mu
    std::chrono::milliseconds lease{0};                  // guarded by mu
    bool watched = false;                                // guarded by mu
    int64_t watch_generation = 0;                        // the newest watcher's; guarded by mu
    bool lease_expired = false;                          // guarded by mu
    std::chrono::milliseconds heartbeat_timeout{0};      // guarded by mu
    std::map<std::pair<int, int>, RankHealth> health;    // (attempt, rank); guarded by mu
    // Note [Controller failover]: every RankStarted and RankEnded of the
    // newest attempt, in order, for a watcher that asks for a replay.
    std::vector<RankEvent> lifecycle;                    // guarded by mu
    // A rank's event for the watcher (and, if it starts or ends a rank, for
    // the replay). Takes mu.
    void Record(RankEvent event);
  };

  // The gate's checks of the agent token, of the agent token with a job's
  // credential, and of a Heartbeat's rank token.
  grpc::Status CheckAgentToken(const grpc::ServerContextBase& context) const;
  grpc::Status CheckJobCredential(const grpc::ServerContextBase& context, const google::protobuf::Message& request);
  grpc::Status CheckRankToken(const google::protobuf::Message& request);
  // Note [Per-job credentials]: the job `job_id` if the call's credential is
  // the one it is bound to; nullptr when the agent does not know the job,
  // unless `bind`, which creates it bound to the call's credential. Refused
  // (PERMISSION_DENIED) when the job is bound to another credential, unless
  // `bind` and the job is over (no live rank, no watcher): then the job
  // starts afresh under the call's credential (a rerun with the same id). The
  // gate has checked the call; handlers look jobs up through this so that a
  // job forgotten and re-created between the gate and the handler is checked
  // again under the lock.
  grpc::Status JobOfCall(const grpc::ServerContextBase& context, const std::string& job_id, bool bind,
                         std::shared_ptr<Job>* job);
  // No live rank and no watcher (takes job.mu).
  static bool JobIsOver(Job& job);
  // A job bound to `credential`, its lease the default.
  std::shared_ptr<Job> NewJob(const std::string& job_id, const std::string& credential);
  // Any job by id, for the rank-token checks and the agent's own report.
  std::shared_ptr<Job> FindJob(const std::string& job_id);
  void Touch(Job& job);
  // `cause.detail` is also what the agent logs.
  int StopRanks(Job& job, int up_to_attempt, std::chrono::milliseconds grace,
                const RankSupervisor::StopCause& cause);
  void LeaseLoop();
  // Note [Controller failover]: the new watcher's queue, holding what the
  // old one had not taken (after a replay, if asked); closes the old one.
  // REQUIRES: job.mu held.
  using EventQueue = BlockingQueue<RankEvent>;
  static std::shared_ptr<EventQueue> TakeOverEvents(Job& job, const WatchRequest& request);
  // Reports ranks that went quiet for longer than the job's heartbeat timeout.
  void CheckHeartbeats(Job& job, std::chrono::steady_clock::time_point now);

  const AgentConfig config_;
  // Lock order: mu_, then a job's mu; never mu_ under a job's lock.
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // guarded by mu_
  bool shutting_down_ = false;                        // guarded by mu_
  std::string rank_contact_address_;                  // guarded by mu_
  std::condition_variable shutdown_cv_;
  std::thread lease_thread_;
  AuthenticatedService gate_;
};

}  // namespace dslaunch
