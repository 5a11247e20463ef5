#include "agent/agent_service.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/core_binding.h"
#include "common/auth_token.h"
#include "common/core_list.h"
#include "common/grpc_status.h"
#include "common/control_plane_limits.h"
#include "common/log.h"
#include "common/net_address.h"
#include "common/rank_contract.h"
#include "common/start_ranks_environment.h"
#include "common/version.h"

namespace dslaunch {

AgentService::AgentService(AgentConfig config)
    : config_(std::move(config)),
      gate_(AgentAuthPolicy(),
            {{RpcCredential::kAgentToken,
              [this](const grpc::ServerContextBase& context, const google::protobuf::Message&) {
                return CheckAgentToken(context);
              }},
             {RpcCredential::kAgentAndJobToken,
              [this](const grpc::ServerContextBase& context, const google::protobuf::Message& request) {
                return CheckJobCredential(context, request);
              }},
             {RpcCredential::kRankToken,
              [this](const grpc::ServerContextBase&, const google::protobuf::Message& request) {
                return CheckRankToken(request);
              }}}) {
  gate_.Unary("/dslaunch.Agent/Describe", this, &AgentService::Describe);
  gate_.Unary("/dslaunch.Agent/ReservePort", this, &AgentService::ReservePort);
  gate_.Unary("/dslaunch.Agent/StartRanks", this, &AgentService::StartRanks);
  gate_.Unary("/dslaunch.Agent/StopJob", this, &AgentService::StopJob);
  gate_.Unary("/dslaunch.Agent/KeepAlive", this, &AgentService::KeepAlive);
  gate_.ServerStreaming("/dslaunch.Agent/Watch", this, &AgentService::Watch);
  gate_.Unary("/dslaunch.Agent/Heartbeat", this, &AgentService::Heartbeat);
  gate_.Unary("/dslaunch.Agent/Diagnose", this, &AgentService::Diagnose);
  lease_thread_ = std::thread([this] { LeaseLoop(); });
}

void AgentService::Serve(grpc::ServerBuilder& builder) { gate_.Serve(builder); }

AgentService::~AgentService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  shutdown_cv_.notify_all();
  lease_thread_.join();
  StopAllJobs(std::chrono::milliseconds(0), "agent shutting down");
}

grpc::Status AgentService::CheckAgentToken(const grpc::ServerContextBase& context) const {
  if (CallHasToken(context, config_.token)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "dsagent: missing or wrong token; check --token_file on both sides");
}

namespace {

// Note [Core binding]: each rank of the request (by global rank) with its
// share of this host's cores, in local-rank order.
absl::StatusOr<std::map<int, RankCores>> CoreShares(const StartRanksRequest& request, const std::string& host) {
  const std::vector<int> mine = AffinityCores();
  std::vector<int> available = mine;
  if (!request.core_binding().core_list().empty()) {
    auto listed = ParseCoreList(request.core_binding().core_list(), "--bind_core_list");
    if (!listed.ok()) return listed.status();
    for (int core : *listed) {
      if (!std::binary_search(mine.begin(), mine.end(), core)) {
        return absl::FailedPreconditionError(absl::StrCat("--bind_core_list: core ", core, " is not available on host ",
                                                          host, " (its cores: ", FormatCoreList(mine), ")"));
      }
    }
    available = std::move(*listed);
  }
  std::vector<std::pair<int, int>> ranks;  // (local rank, global rank)
  for (const RankSpec& rank : request.ranks()) ranks.emplace_back(rank.local_rank(), rank.global_rank());
  std::sort(ranks.begin(), ranks.end());
  auto split = SplitCoresAmongRanks(available, static_cast<int>(ranks.size()), NumaNodeCores(), host);
  if (!split.ok()) return split.status();
  std::map<int, RankCores> shares;
  for (size_t i = 0; i < ranks.size(); ++i) shares[ranks[i].second] = (*split)[i];
  return shares;
}

const grpc::Status& UnknownRankRefusal() {
  static const grpc::Status* refused =
      new grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                       "dsagent: heartbeat for an unknown rank or with a wrong rank token");
  return *refused;
}

}  // namespace

grpc::Status AgentService::CheckRankToken(const google::protobuf::Message& request) {
  // The table lists the rank token for Heartbeat only (rpc_auth_policy.cc).
  const auto* beat = dynamic_cast<const HeartbeatRequest*>(&request);
  if (beat == nullptr) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "dsagent: a rank token authenticates Heartbeat only");
  }
  std::shared_ptr<Job> job = FindJob(beat->job_id());
  if (!job) return UnknownRankRefusal();
  std::lock_guard<std::mutex> lock(job->mu);
  auto it = job->health.find({beat->attempt(), beat->global_rank()});
  if (it == job->health.end() || !TokensEqual(it->second.token, beat->rank_token())) {
    return UnknownRankRefusal();
  }
  return grpc::Status::OK;
}

grpc::Status AgentService::CheckJobCredential(const grpc::ServerContextBase& context,
                                              const google::protobuf::Message& request) {
  if (grpc::Status agent = CheckAgentToken(context); !agent.ok()) return agent;
  // The table lists this credential for requests that name a job only
  // (rpc_auth_policy_test.cc checks that each of them has a job_id).
  const google::protobuf::FieldDescriptor* field = request.GetDescriptor()->FindFieldByName("job_id");
  if (field == nullptr || field->type() != google::protobuf::FieldDescriptor::TYPE_STRING ||
      field->is_repeated()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("dsagent: ", request.GetTypeName(), " names no job to check a job credential against"));
  }
  const std::string job_id = request.GetReflection()->GetString(request, field);
  const std::string credential = CallJobToken(context);
  if (credential.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("dsagent: a call about job ", job_id, " needs the job's own credential in ",
                                     kJobTokenMetadataKey, " (its dslaunch makes one per run); this call has none"));
  }
  if (absl::Status strong = CheckTokenStrength(credential); !strong.ok()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("dsagent: a call about job ", job_id, " needs the job's own credential in ",
                                     kJobTokenMetadataKey, "; this call's is weak: ", strong.message()));
  }
  // Bound to another credential: refused, unless the job is over, which a
  // binding call (StartRanks, Watch, KeepAlive) may take; JobOfCall decides.
  std::shared_ptr<Job> job = FindJob(job_id);
  if (job && !TokensEqual(job->credential, credential) && !JobIsOver(*job)) {
    return JobOfCall(context, job_id, /*bind=*/false, &job);
  }
  return grpc::Status::OK;
}

bool AgentService::JobIsOver(Job& job) {
  std::lock_guard<std::mutex> lock(job.mu);
  if (job.watched) return false;
  for (const auto& rank : job.ranks) {
    if (!rank->ended()) return false;
  }
  return true;
}

std::shared_ptr<AgentService::Job> AgentService::NewJob(const std::string& job_id, const std::string& credential) {
  auto created = std::make_shared<Job>(job_id, credential);
  std::lock_guard<std::mutex> job_lock(created->mu);  // no other thread can hold it yet
  created->last_contact = std::chrono::steady_clock::now();
  created->lease = config_.default_lease;
  return created;
}

grpc::Status AgentService::JobOfCall(const grpc::ServerContextBase& context, const std::string& job_id, bool bind,
                                     std::shared_ptr<Job>* job) {
  const std::string credential = CallJobToken(context);
  std::shared_ptr<Job> other;  // the job, bound to another credential
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      if (!bind) {
        job->reset();
        return grpc::Status::OK;
      }
      it = jobs_.emplace(job_id, NewJob(job_id, credential)).first;
    }
    if (TokensEqual(it->second->credential, credential)) {
      *job = it->second;
      return grpc::Status::OK;
    }
    other = it->second;
  }
  // A job whose ranks have all ended and that nobody watches is over: a new
  // dslaunch may take its id at once (a rerun with the same --job_id),
  // without waiting for the agent to forget it a lease later. Whether it is
  // over is asked outside mu_, and the job replaced only if it is still the
  // one asked about.
  if (bind && JobIsOver(*other)) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && it->second == other) {
      LogLine(absl::StrCat("job ", job_id, ": ended and unwatched; a new controller takes the id"));
      it->second = NewJob(job_id, credential);
      *job = it->second;
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("dsagent: job ", job_id, " belongs to another controller: the call's job "
                                   "credential is not the one the job was started with (does another dslaunch "
                                   "run with --job_id ", job_id, "?)"));
}

std::shared_ptr<AgentService::Job> AgentService::FindJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

void AgentService::Touch(Job& job) {
  std::lock_guard<std::mutex> lock(job.mu);
  job.last_contact = std::chrono::steady_clock::now();
}

grpc::Status AgentService::Describe(grpc::ServerContext* context, const DescribeRequest*,
                                    DescribeReply* reply) {
  reply->set_hostname(config_.hostname);
  reply->set_gpu_count(config_.gpu_count);
  reply->set_pid(::getpid());
  reply->set_version(VersionLine("dsagent"));
  return grpc::Status::OK;
}

grpc::Status AgentService::ReservePort(grpc::ServerContext* context, const ReservePortRequest*,
                                       ReservePortReply* reply) {
  auto port = PickFreePort();
  if (!port.ok()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("cannot pick a free port: ", port.status().message()));
  }
  reply->set_port(*port);
  return grpc::Status::OK;
}

grpc::Status AgentService::StartRanks(grpc::ServerContext* context,
                                      const StartRanksRequest* request, StartRanksReply* reply) {
  if (request->job_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "StartRanks: empty job_id");
  }
  if (request->lease_ms() > kMaxLeaseMs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StartRanks: lease_ms ", request->lease_ms(), " is above the bound of ",
                                     kMaxLeaseMs, " ms"));
  }
  // Note [Ranks as another user]: the job's user, if it names one, is one
  // the operator allowed; checked before the job is bound or anything starts.
  std::optional<RunAsUser> run_as = config_.run_as;
  if (!request->run_as().empty()) {
    // The agent's own --run_as user is allowed as well.
    std::vector<RunAsUser> users = config_.allowed_run_as;
    if (config_.run_as) users.push_back(*config_.run_as);
    const RunAsUser* allowed = AllowedRunAsUser(users, request->run_as());
    if (allowed == nullptr) {
      std::vector<std::string> names;
      for (const RunAsUser& user : users) names.push_back(user.name);
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("dsagent on ", config_.hostname, ": the job asks to run its ranks as '", request->run_as(),
                       "' (dslaunch --run_as), which this agent does not allow (dsagent --allow_run_as: ",
                       names.empty() ? "none" : absl::StrJoin(names, ","), ")"));
    }
    run_as = *allowed;
  }
  std::shared_ptr<Job> job;
  if (grpc::Status owned = JobOfCall(*context, request->job_id(), /*bind=*/true, &job); !owned.ok()) return owned;
  // Read before the job's lock: mu_ is never taken under a job's lock (the
  // lease loop takes the two the other way round).
  std::string contact;
  {
    std::lock_guard<std::mutex> service_lock(mu_);
    contact = rank_contact_address_;
  }
  std::vector<RankSupervisor*> started;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    job->last_contact = std::chrono::steady_clock::now();
    if (request->lease_ms() > 0) job->lease = std::chrono::milliseconds(request->lease_ms());
    job->lease_expired = false;
    for (const auto& rank : job->ranks) {
      if (!rank->ended() && rank->attempt() >= request->attempt()) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            absl::StrCat("job ", job->id, " already runs rank ",
                                         rank->global_rank(), " of attempt ", rank->attempt(),
                                         " on this agent"));
      }
    }
    job->heartbeat_timeout = std::chrono::milliseconds(std::max<int64_t>(0, request->heartbeat_timeout_ms()));
    // A replay serves the newest attempt only (Note [Controller failover]).
    std::erase_if(job->lifecycle, [&](const RankEvent& event) { return event.attempt() < request->attempt(); });
    // Note [Core binding]: every rank's share, or the whole request is refused.
    std::map<int, RankCores> cores_of_rank;
    if (request->core_binding().enabled()) {
      auto shares = CoreShares(*request, config_.hostname);
      if (!shares.ok()) return ToGrpcStatus(shares.status());
      cores_of_rank = std::move(*shares);
    }
    for (const RankSpec& spec : request->ranks()) {
      SpawnRequest spawn;
      spawn.argv.assign(spec.argv().begin(), spec.argv().end());
      spawn.env = StartRanksEnvironment(*request, spec);
      spawn.working_dir = spec.working_dir();
      spawn.keeper = config_.keeper_path;
      if (auto share = cores_of_rank.find(spec.global_rank()); share != cores_of_rank.end()) {
        spawn.cpus = share->second.cores;
        spawn.mem_node = share->second.numa_node;
        // As DeepSpeed's launcher: one OpenMP thread per core of the share.
        if (!spawn.env.count("OMP_NUM_THREADS")) spawn.env["OMP_NUM_THREADS"] = absl::StrCat(spawn.cpus.size());
      }
      // Note [Rank heartbeats]: a token of its own, never the agent's.
      RankHealth& health = job->health[{request->attempt(), spec.global_rank()}];
      health = RankHealth();
      health.token = GenerateToken();
      if (!contact.empty()) {
        spawn.env[rank_env::kAgentAddr] = contact;
        spawn.env[rank_env::kRankToken] = health.token;
      }
      // Note [Mutual TLS]: the rank reaches this agent and the store as the host does.
      if (!config_.tls_dir.empty()) spawn.env[rank_env::kTlsDir] = config_.tls_dir;
      // Note [Ranks as another user]: its ids, and its HOME, USER, LOGNAME
      // unless the job sets them.
      if (run_as) {
        spawn.uid = run_as->uid;
        spawn.gid = run_as->gid;
        spawn.groups = run_as->groups;
        spawn.env.emplace("HOME", run_as->home);
        spawn.env.emplace("USER", run_as->name);
        spawn.env.emplace("LOGNAME", run_as->name);
      }
      Job* raw_job = job.get();
      job->ranks.push_back(std::make_unique<RankSupervisor>(
          request->attempt(), spec.global_rank(), std::move(spawn),
          [raw_job](RankEvent event) { raw_job->Record(std::move(event)); }));
      started.push_back(job->ranks.back().get());
    }
  }
  // Outside the job lock: a spawn takes milliseconds and StopJob must not wait for it.
  for (RankSupervisor* rank : started) reply->add_pids(rank->WaitForSpawn());
  reply->set_common_env_applied(true);
  reply->set_run_as_applied(!request->run_as().empty());
  LogLine(absl::StrCat("job ", request->job_id(), " attempt ", request->attempt(), ": started ",
                       request->ranks_size(), " rank(s)"));
  return grpc::Status::OK;
}

int AgentService::StopRanks(Job& job, int up_to_attempt, std::chrono::milliseconds grace,
                            const RankSupervisor::StopCause& cause) {
  int signalled = 0;
  std::lock_guard<std::mutex> lock(job.mu);
  for (const auto& rank : job.ranks) {
    if (up_to_attempt >= 0 && rank->attempt() > up_to_attempt) continue;
    if (rank->Stop(grace, cause)) ++signalled;
  }
  if (signalled > 0) {
    LogLine(absl::StrCat("job ", job.id, ": stopping ", signalled, " rank(s) (", cause.detail,
                         "; grace ", grace.count(), " ms)"));
  }
  return signalled;
}

grpc::Status AgentService::StopJob(grpc::ServerContext* context, const StopJobRequest* request,
                                   StopJobReply* reply) {
  if (request->grace_ms() > kMaxStopGraceMs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StopJob: grace_ms ", request->grace_ms(), " is above the bound of ",
                                     kMaxStopGraceMs, " ms"));
  }
  std::shared_ptr<Job> job;
  if (grpc::Status owned = JobOfCall(*context, request->job_id(), /*bind=*/false, &job); !owned.ok()) return owned;
  if (!job) {
    reply->set_signalled(0);
    return grpc::Status::OK;
  }
  Touch(*job);
  // The stopped ranks' RankEnded name the caller: a controller that did not
  // send this StopJob can say who did (Note [Honest exits], job_controller.h).
  RankSupervisor::StopCause cause;
  cause.reason = STOP_REQUESTED;
  cause.detail = absl::StrCat("StopJob from ",
                              request->requester().empty() ? "a caller that gave no name" : request->requester(),
                              " (", context->peer(), ")",
                              request->reason().empty() ? "" : ": ", request->reason());
  reply->set_signalled(StopRanks(*job, request->attempt(),
                                 std::chrono::milliseconds(std::max<int64_t>(0, request->grace_ms())), cause));
  return grpc::Status::OK;
}

grpc::Status AgentService::KeepAlive(grpc::ServerContext* context, const KeepAliveRequest* request,
                                     KeepAliveReply*) {
  std::shared_ptr<Job> job;
  if (grpc::Status owned = JobOfCall(*context, request->job_id(), /*bind=*/true, &job); !owned.ok()) return owned;
  Touch(*job);
  return grpc::Status::OK;
}

grpc::Status AgentService::Watch(grpc::ServerContext* context, const WatchRequest* request,
                                 grpc::ServerWriter<RankEvent>* writer) {
  std::shared_ptr<Job> job;
  if (grpc::Status owned = JobOfCall(*context, request->job_id(), /*bind=*/true, &job); !owned.ok()) return owned;
  std::shared_ptr<EventQueue> events;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    // Note [Controller failover]: a replay of ranks this agent never ran (or
    // forgot once its lease to the dead controller ran out) would be a
    // silence the new controller waits on forever.
    const bool knows_attempt = std::any_of(job->ranks.begin(), job->ranks.end(), [&](const auto& rank) {
      return rank->attempt() >= request->replay_from_attempt();
    });
    if (request->replay() && !knows_attempt) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", job->id, " has no rank of attempt ", request->replay_from_attempt(),
                                       " on this agent (did its lease run out before the new controller came?)"));
    }
    // The newest watcher takes over: after a network partition the old
    // stream may not have noticed yet that its controller reconnected.
    if (job->watched) {
      LogLine(absl::StrCat("job ", job->id, ": a new watcher from ", context->peer(),
                           " replaces the previous one"));
    }
    generation = ++job->watch_generation;
    job->watched = true;
    job->last_contact = std::chrono::steady_clock::now();
    events = TakeOverEvents(*job, *request);
  }
  // Tells the caller the stream is open before it starts any rank.
  RankEvent accepted;
  accepted.set_global_rank(-1);
  accepted.mutable_accepted();
  writer->Write(accepted);
  while (!context->IsCancelled()) {
    auto event = events->PopFor(std::chrono::milliseconds(100));
    if (!event) {
      if (events->closed()) break;  // a newer watcher took over, or the agent stops
      continue;
    }
    if (!writer->Write(*event)) {
      // The event is lost with the stream; the controller treats a broken
      // stream as a lost host anyway.
      break;
    }
  }
  std::lock_guard<std::mutex> lock(job->mu);
  if (job->watch_generation == generation) job->watched = false;
  return grpc::Status::OK;
}

// Note [Controller failover]
// dslaunch --resume_job starts a controller for a job whose controller died
// while its ranks run on agents that outlive it (--agents). The new
// controller knows the ranks only from its journal; what happened since the
// old one stopped reading lies in the job's event queue, less whatever the
// dying stream had taken from it. So a watcher that asks for a replay gets,
// first, the newest attempt's RankStarted and RankEnded events as they
// happened (Job::lifecycle), then the queued events that are not among
// them, then what comes. Each watcher reads a queue of its own: under the
// job's lock, a new watcher moves what is queued into its queue and closes
// the old one, and Record() appends to the lifecycle and the current queue,
// so no start or end is told twice, or taken by a stream already replaced.
std::shared_ptr<AgentService::EventQueue> AgentService::TakeOverEvents(Job& job, const WatchRequest& request) {
  auto starts_or_ends = [](const RankEvent& event) { return event.has_started() || event.has_ended(); };
  auto events = std::make_shared<EventQueue>();
  if (request.replay()) {
    for (const RankEvent& event : job.lifecycle) {
      if (event.attempt() >= request.replay_from_attempt()) events->Push(event);
    }
  }
  while (auto queued = job.events->PopFor(std::chrono::milliseconds(0))) {
    if (!request.replay() || !starts_or_ends(*queued)) events->Push(std::move(*queued));
  }
  job.events->Close();
  if (job.events_closed) events->Close();
  job.events = events;
  return events;
}

void AgentService::Job::Record(RankEvent event) {
  std::lock_guard<std::mutex> lock(mu);
  if (event.has_started() || event.has_ended()) lifecycle.push_back(event);
  events->Push(std::move(event));
}

void AgentService::SetRankContactAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  rank_contact_address_ = address;
}

grpc::Status AgentService::Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request,
                                     HeartbeatReply*) {
  // The gate checked the rank token (CheckRankToken); a job forgotten since
  // then is refused the same way.
  std::shared_ptr<Job> job = FindJob(request->job_id());
  if (!job) return UnknownRankRefusal();
  RankEvent event;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    auto it = job->health.find({request->attempt(), request->global_rank()});
    if (it == job->health.end() || !TokensEqual(it->second.token, request->rank_token())) {
      return UnknownRankRefusal();
    }
    RankHealth& health = it->second;
    health.last = std::chrono::steady_clock::now();
    health.reported = true;
    health.missed_reported = false;
    health.progress.Clear();
    health.progress.set_step(request->step());
    *health.progress.mutable_recent_collectives() = request->recent_collectives();
    if (request->has_metrics()) *health.progress.mutable_metrics() = request->metrics();
    event.set_attempt(request->attempt());
    event.set_global_rank(request->global_rank());
    *event.mutable_progress() = health.progress;
  }
  job->Record(std::move(event));
  return grpc::Status::OK;
}

void AgentService::CheckHeartbeats(Job& job, std::chrono::steady_clock::time_point now) {
  std::vector<RankEvent> missed;
  {
    std::lock_guard<std::mutex> lock(job.mu);
    if (job.heartbeat_timeout.count() <= 0) return;
    for (const auto& rank : job.ranks) {
      if (rank->ended()) continue;
      auto it = job.health.find({rank->attempt(), rank->global_rank()});
      if (it == job.health.end() || !it->second.reported || it->second.missed_reported) continue;
      const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last);
      if (quiet <= job.heartbeat_timeout) continue;
      it->second.missed_reported = true;
      RankEvent event;
      event.set_attempt(rank->attempt());
      event.set_global_rank(rank->global_rank());
      *event.mutable_progress() = it->second.progress;
      event.mutable_progress()->set_missed_heartbeat_ms(quiet.count());
      missed.push_back(std::move(event));
    }
  }
  for (auto& event : missed) {
    LogLine(absl::StrCat("job ", job.id, ": rank ", event.global_rank(), " sent no heartbeat for ",
                         event.progress().missed_heartbeat_ms(), " ms while its process lives"));
    job.Record(std::move(event));
  }
}

namespace {

// Every thread's native stack of `pid` (eu-stack from elfutils), bounded in
// size and time; a line saying why when it cannot be had.
std::string NativeStacks(pid_t pid) {
  constexpr size_t kLimit = 256 * 1024;
  const std::string command = absl::StrCat("timeout 20 eu-stack -p ", pid, " 2>&1");
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "dsagent: cannot run eu-stack (popen failed)";
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    if (out.size() < kLimit) out.append(buffer, std::min(n, kLimit - out.size()));
  }
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return "dsagent: eu-stack is not installed on this host (Debian: apt-get install elfutils)";
  }
  if (out.size() >= kLimit) out += "\n[... cut at 256 KiB]\n";
  return out;
}

}  // namespace

grpc::Status AgentService::Diagnose(grpc::ServerContext* context, const DiagnoseRequest* request,
                                    DiagnoseReply* reply) {
  std::shared_ptr<Job> job;
  if (grpc::Status owned = JobOfCall(*context, request->job_id(), /*bind=*/false, &job); !owned.ok()) return owned;
  if (!job) return grpc::Status::OK;
  Touch(*job);
  struct Target {
    int rank;
    pid_t pid;
    RankProgress progress;
    int64_t age_ms;
  };
  std::vector<Target> targets;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& rank : job->ranks) {
      if (rank->ended() || rank->attempt() != request->attempt()) continue;
      Target target{rank->global_rank(), rank->pid(), RankProgress(), -1};
      auto it = job->health.find({rank->attempt(), rank->global_rank()});
      if (it != job->health.end() && it->second.reported) {
        target.progress = it->second.progress;
        target.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last).count();
      }
      targets.push_back(std::move(target));
    }
  }
  // Outside the lock: a stack dump takes a moment per process.
  for (const Target& target : targets) {
    RankDiagnosis* diagnosis = reply->add_ranks();
    diagnosis->set_global_rank(target.rank);
    diagnosis->set_pid(target.pid);
    diagnosis->set_stacks(target.pid > 0 ? NativeStacks(target.pid) : "dsagent: the rank has no process");
    *diagnosis->mutable_last_heartbeat() = target.progress;
    diagnosis->set_heartbeat_age_ms(target.age_ms);
  }
  LogLine(absl::StrCat("job ", job->id, " attempt ", request->attempt(), ": diagnosed ",
                       targets.size(), " rank(s) for the controller"));
  return grpc::Status::OK;
}

int AgentService::StopAllJobs(std::chrono::milliseconds grace, const std::string& reason) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) jobs.push_back(job);
  }
  int signalled = 0;
  RankSupervisor::StopCause cause;
  cause.reason = STOP_AGENT_SHUTDOWN;
  cause.detail = reason;
  for (auto& job : jobs) signalled += StopRanks(*job, -1, grace, cause);
  // Wait for every rank to be reaped (the supervisors escalate to SIGKILL
  // after the grace themselves), then drop them.
  for (auto& job : jobs) {
    std::vector<std::unique_ptr<RankSupervisor>> ranks;
    {
      std::lock_guard<std::mutex> lock(job->mu);
      ranks.swap(job->ranks);
    }
    for (auto& rank : ranks) rank->WaitEnded();
    ranks.clear();
    std::lock_guard<std::mutex> lock(job->mu);
    job->events_closed = true;
    job->events->Close();
  }
  return signalled;
}

std::vector<AgentJobReport> AgentService::Report() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  const auto now = std::chrono::steady_clock::now();
  auto seconds = [](std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::vector<AgentJobReport> reports;
  for (const auto& job : jobs) {
    AgentJobReport& report = reports.emplace_back();
    report.job_id = job->id;
    std::lock_guard<std::mutex> lock(job->mu);
    report.seconds_since_controller_contact = seconds(now - job->last_contact);
    report.lease_seconds = seconds(job->lease);
    for (const auto& supervisor : job->ranks) {
      AgentJobReport::Rank& rank = report.ranks.emplace_back();
      rank.attempt = supervisor->attempt();
      RankStatus& status = rank.status;
      status.set_global_rank(supervisor->global_rank());
      status.set_host(config_.hostname);
      status.set_state(supervisor->state());
      status.set_pid(supervisor->pid());
      status.set_step(-1);
      status.set_heartbeat_age_ms(-1);
      auto health = job->health.find({supervisor->attempt(), supervisor->global_rank()});
      if (health != job->health.end() && health->second.reported) {
        status.set_step(health->second.progress.step());
        status.set_heartbeat_age_ms(
            std::chrono::duration_cast<std::chrono::milliseconds>(now - health->second.last).count());
        if (health->second.progress.has_metrics()) *status.mutable_metrics() = health->second.progress.metrics();
      }
    }
  }
  return reports;
}

int AgentService::LiveRankCount(const std::string& job_id) {
  std::shared_ptr<Job> job = FindJob(job_id);
  if (!job) return 0;
  std::lock_guard<std::mutex> lock(job->mu);
  int live = 0;
  for (const auto& rank : job->ranks) live += rank->ended() ? 0 : 1;
  return live;
}

void AgentService::LeaseLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    shutdown_cv_.wait_for(lock, config_.lease_check_interval);
    if (shutting_down_) break;
    auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<std::shared_ptr<Job>, RankSupervisor::StopCause>> expired;
    std::vector<std::string> forget;
    for (auto& [id, job] : jobs_) CheckHeartbeats(*job, now);
    for (auto& [id, job] : jobs_) {
      std::lock_guard<std::mutex> job_lock(job->mu);
      if (now - job->last_contact <= job->lease) continue;
      bool live = false;
      for (const auto& rank : job->ranks) live = live || !rank->ended();
      if (live && !job->lease_expired) {
        job->lease_expired = true;
        RankSupervisor::StopCause cause;
        cause.reason = STOP_LEASE_EXPIRED;
        cause.controller_silent_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - job->last_contact).count();
        cause.detail = absl::StrCat("no word from the controller for ", cause.controller_silent_ms,
                                    " ms (lease ", job->lease.count(), " ms)");
        expired.emplace_back(job, std::move(cause));
      } else if (!live && !job->watched) {
        forget.push_back(id);
      }
    }
    for (const auto& id : forget) jobs_.erase(id);
    lock.unlock();
    for (auto& [job, cause] : expired) {
      LogLine(absl::StrCat("job ", job->id, ": ", cause.detail, "; stopping its ranks"));
      StopRanks(*job, -1, config_.lease_stop_grace, cause);
    }
    lock.lock();
  }
}

}  // namespace dslaunch
