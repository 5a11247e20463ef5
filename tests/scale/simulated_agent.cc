#include "tests/scale/simulated_agent.h"

#include <unistd.h>

#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "common/rank_contract.h"
#include "common/version.h"

namespace dslaunch::scale {

namespace {

constexpr size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId)
constexpr std::chrono::minutes kRendezvousTimeout{10};  // nccl_communicator.cc's WaitGet

void RaiseToAtLeast(std::atomic<int64_t>& value, int64_t candidate) {
  int64_t seen = value.load();
  while (seen < candidate && !value.compare_exchange_weak(seen, candidate)) {
  }
}

void SetOnce(std::atomic<int64_t>& value) {
  int64_t zero = 0;
  value.compare_exchange_strong(zero, NowUnixMicros());
}

std::string EnvOf(const StartRanksRequest& request, const RankSpec& spec, const char* name) {
  if (auto it = spec.env().find(name); it != spec.env().end()) return it->second;
  if (auto it = request.common_env().find(name); it != request.common_env().end()) return it->second;
  return "";
}

int IntEnvOf(const StartRanksRequest& request, const RankSpec& spec, const char* name) {
  int value = 0;
  if (!absl::SimpleAtoi(EnvOf(request, spec, name), &value)) return -1;
  return value;
}

}  // namespace

int64_t NowUnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SimulationCounters::Notify() {
  std::lock_guard<std::mutex> lock(mu);
  changed.notify_all();
}

// The Watch stream of one controller: one write in flight at a time, the
// rest queued; ends when the controller cancels it.
class WatchStream final : public grpc::ServerWriteReactor<RankEvent> {
 public:
  WatchStream(SimulatedAgent* agent) : agent_(agent) {}

  void Push(RankEvent event) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    queue_.push_back(std::move(event));
    if (!writing_) WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    if (cancelled_) {
      FinishOnceLocked();
      return;
    }
    if (!queue_.empty()) WriteNextLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!writing_) FinishOnceLocked();
  }

  void OnDone() override {
    agent_->Detach(this);
    delete this;
  }

 private:
  void WriteNextLocked() {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }
  void FinishOnceLocked() {
    if (finished_) return;
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the controller ended the watch"));
  }

  SimulatedAgent* const agent_;
  std::mutex mu_;
  std::deque<RankEvent> queue_;  // guarded by mu_
  RankEvent current_;            // the write in flight; guarded by mu_
  bool writing_ = false;         // guarded by mu_
  bool cancelled_ = false;       // guarded by mu_
  bool finished_ = false;        // guarded by mu_
};

// One rank's way through the three NCCL unique-id exchanges, each call's
// callback issuing the next call.
struct RankRendezvous : std::enable_shared_from_this<RankRendezvous> {
  struct Group {
    std::string name;
    bool first_member = false;
  };

  SimulatedAgent* agent = nullptr;
  int rank_index = 0;  // in the agent's ranks_
  std::string token;
  StoreScope scope;
  std::unique_ptr<Store::Stub> stub;
  std::vector<Group> groups;
  size_t next = 0;

  std::string Key() const { return absl::StrCat("comm/", groups[next].name, "/nccl_unique_id"); }

  // One store call in flight: what gRPC's callback reads and writes lives
  // here until the callback has run.
  template <typename Request, typename Reply>
  struct Call {
    grpc::ClientContext context;
    Request request;
    Reply reply;
  };

  // A call with the rank's token, a deadline, and the attempt's scope.
  template <typename Request, typename Reply>
  std::shared_ptr<Call<Request, Reply>> NewCall(std::chrono::milliseconds deadline) const {
    auto call = std::make_shared<Call<Request, Reply>>();
    AttachToken(&call->context, token);
    call->context.set_deadline(std::chrono::system_clock::now() + deadline);
    call->context.set_wait_for_ready(true);
    *call->request.mutable_scope() = scope;
    return call;
  }

  void Step() {
    if (!agent->IsLive(rank_index)) return;  // stopped: a real rank would be gone
    if (next == groups.size()) {
      agent->RendezvousDone(rank_index, "");
      return;
    }
    agent->counters_->store_calls.fetch_add(1);
    if (groups[next].first_member) {
      Publish();
    } else {
      AwaitKey();
    }
  }

  void Fail(const std::string& call, const grpc::Status& status) {
    agent->RendezvousDone(rank_index, absl::StrCat("store ", call, " of ", Key(), ": ",
                                                   status.error_message()));
  }

  void Publish() {
    auto call = NewCall<StoreSetRequest, StoreSetReply>(std::chrono::seconds(60));
    call->request.set_key(Key());
    call->request.set_value(std::string(kUniqueIdBytes, static_cast<char>('a' + next)));
    stub->async()->Set(&call->context, &call->request, &call->reply,
                       [self = shared_from_this(), call](grpc::Status status) {
                         if (!status.ok()) return self->Fail("Set", status);
                         ++self->next;
                         self->Step();
                       });
  }

  // A real rank's c10d get (StoreClient::WaitGet): one Wait whose reply
  // carries the value.
  void AwaitKey() {
    auto call = NewCall<StoreWaitRequest, StoreWaitReply>(kRendezvousTimeout + std::chrono::seconds(60));
    call->request.add_keys(Key());
    call->request.set_timeout_ms(std::chrono::milliseconds(kRendezvousTimeout).count());
    stub->async()->Wait(&call->context, &call->request, &call->reply,
                        [self = shared_from_this(), call](grpc::Status status) {
                          if (!status.ok()) return self->Fail("Wait", status);
                          if (call->reply.values_size() != 1 || call->reply.values(0).size() != kUniqueIdBytes) {
                            return self->Fail("Wait", grpc::Status(grpc::StatusCode::DATA_LOSS,
                                                                   "the reply carries no 128-byte unique id"));
                          }
                          ++self->next;
                          self->Step();
                        });
  }
};

SimulatedAgent::SimulatedAgent(int index, int gpu_count, SimulationCounters* counters)
    : index_(index), gpu_count_(gpu_count), counters_(counters) {}

SimulatedAgent::~SimulatedAgent() = default;

bool SimulatedAgent::IsLive(int rank_index) {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank_index].live;
}

void SimulatedAgent::CountFirstCall() { SetOnce(counters_->first_call_us); }

grpc::ServerUnaryReactor* SimulatedAgent::Describe(grpc::CallbackServerContext* context,
                                                   const DescribeRequest*, DescribeReply* reply) {
  CountFirstCall();
  reply->set_hostname(absl::StrCat("sim-", index_));
  reply->set_gpu_count(gpu_count_);
  reply->set_pid(getpid());
  reply->set_version(kDslaunchVersion);
  RaiseToAtLeast(counters_->last_describe_us, NowUnixMicros());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* SimulatedAgent::ReservePort(grpc::CallbackServerContext* context,
                                                      const ReservePortRequest*,
                                                      ReservePortReply* reply) {
  reply->set_port(29500);  // MASTER_PORT: no simulated rank listens on it
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* SimulatedAgent::StartRanks(grpc::CallbackServerContext* context,
                                                     const StartRanksRequest* request,
                                                     StartRanksReply* reply) {
  CountFirstCall();
  SetOnce(counters_->first_start_ranks_us);
  std::vector<std::shared_ptr<RankRendezvous>> rendezvous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RankSpec& spec : request->ranks()) {
      const int rank_index = static_cast<int>(ranks_.size());
      ranks_.push_back(SimulatedRank{request->attempt(), spec.global_rank(), spec.local_rank()});
      const int64_t pid = 1000000 + static_cast<int64_t>(index_) * 1000 + rank_index;
      reply->add_pids(pid);
      RankEvent started;
      started.set_attempt(request->attempt());
      started.set_global_rank(spec.global_rank());
      started.mutable_started()->set_pid(pid);
      PushLocked(std::move(started));

      auto rank = std::make_shared<RankRendezvous>();
      rank->agent = this;
      rank->rank_index = rank_index;
      rank->token = EnvOf(*request, spec, rank_env::kStoreToken);
      rank->scope.set_job_id(EnvOf(*request, spec, rank_env::kJobId));
      rank->scope.set_attempt(request->attempt());
      const int world = IntEnvOf(*request, spec, rank_env::kWorldSize);
      const int per_host = IntEnvOf(*request, spec, rank_env::kLocalWorldSize);
      const int global = spec.global_rank();
      if (world <= 0 || per_host <= 0) {
        rank->groups.clear();
      } else {
        rank->groups = {{"world", global == 0},
                        {absl::StrCat("tensor.", global / per_host), spec.local_rank() == 0},
                        {absl::StrCat("data.", spec.local_rank()), global < per_host}};
      }
      grpc::ChannelArguments arguments;
      // A rank is a process of its own: its own connection to the store.
      arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      rank->stub = Store::NewStub(grpc::CreateCustomChannel(
          EnvOf(*request, spec, rank_env::kStoreAddr), grpc::InsecureChannelCredentials(),
          arguments));
      rendezvous.push_back(std::move(rank));
    }
  }
  reply->set_common_env_applied(true);
  counters_->ranks_started.fetch_add(request->ranks_size());
  RaiseToAtLeast(counters_->last_start_ranks_us, NowUnixMicros());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  for (auto& rank : rendezvous) {
    if (rank->groups.empty()) {
      RendezvousDone(rank->rank_index, "no WORLD_SIZE or LOCAL_WORLD_SIZE in the rank environment");
    } else {
      rank->Step();
    }
  }
  return reactor;
}

void SimulatedAgent::RendezvousDone(int rank_index, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SimulatedRank& rank = ranks_[rank_index];
    if (!rank.live) return;  // stopped meanwhile: its calls failed for that
    if (error.empty()) {
      rank.past_rendezvous = true;
    } else {
      RankEnded ended;
      ended.set_state(RANK_EXITED);
      ended.set_exit_code(1);
      ended.add_stderr_tail(error);
      EndLocked(rank, std::move(ended));
    }
  }
  if (error.empty()) {
    counters_->ranks_past_rendezvous.fetch_add(1);
    RaiseToAtLeast(counters_->rendezvous_done_us, NowUnixMicros());
  } else {
    counters_->ranks_failed_rendezvous.fetch_add(1);
    std::lock_guard<std::mutex> lock(counters_->mu);
    if (counters_->first_rendezvous_error.empty()) {
      counters_->first_rendezvous_error = absl::StrCat("sim-", index_, ": ", error);
    }
  }
  counters_->Notify();
}

void SimulatedAgent::EndLocked(SimulatedRank& rank, RankEnded ended) {
  rank.live = false;
  ended.set_ended_unix_us(NowUnixMicros());
  RankEvent event;
  event.set_attempt(rank.attempt);
  event.set_global_rank(rank.global_rank);
  *event.mutable_ended() = std::move(ended);
  PushLocked(std::move(event));
  counters_->ranks_ended.fetch_add(1);
}

grpc::ServerUnaryReactor* SimulatedAgent::StopJob(grpc::CallbackServerContext* context,
                                                  const StopJobRequest* request,
                                                  StopJobReply* reply) {
  int signalled = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (SimulatedRank& rank : ranks_) {
      if (!rank.live || (request->attempt() >= 0 && rank.attempt > request->attempt())) continue;
      RankEnded ended;
      ended.set_state(RANK_KILLED);
      ended.set_signal(15);
      ended.set_stopped_by_agent(true);
      ended.set_stop_reason(STOP_REQUESTED);
      ended.set_stop_detail(request->reason());
      EndLocked(rank, std::move(ended));
      ++signalled;
    }
  }
  reply->set_signalled(signalled);
  counters_->stop_calls.fetch_add(1);
  RaiseToAtLeast(counters_->last_stop_us, NowUnixMicros());
  counters_->Notify();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* SimulatedAgent::KeepAlive(grpc::CallbackServerContext* context,
                                                    const KeepAliveRequest*, KeepAliveReply*) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* SimulatedAgent::Diagnose(grpc::CallbackServerContext* context,
                                                   const DiagnoseRequest*, DiagnoseReply*) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                               "a simulated agent has no stacks to give"));
  return reactor;
}

grpc::ServerWriteReactor<RankEvent>* SimulatedAgent::Watch(grpc::CallbackServerContext*,
                                                           const WatchRequest*) {
  CountFirstCall();
  SetOnce(counters_->first_watch_us);
  auto* stream = new WatchStream(this);
  RankEvent accepted;
  accepted.mutable_accepted();
  stream->Push(std::move(accepted));
  std::lock_guard<std::mutex> lock(mu_);
  watcher_ = stream;  // the newest watcher gets the events, as in the real agent
  while (!pending_.empty()) {
    stream->Push(std::move(pending_.front()));
    pending_.pop_front();
  }
  return stream;
}

void SimulatedAgent::Detach(WatchStream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (watcher_ == stream) watcher_ = nullptr;
}

void SimulatedAgent::PushLocked(RankEvent event) {
  counters_->watch_events.fetch_add(1);
  if (watcher_ != nullptr) {
    watcher_->Push(std::move(event));
  } else {
    pending_.push_back(std::move(event));
  }
}

void SimulatedAgent::SendHeartbeats(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const SimulatedRank& rank : ranks_) {
    if (!rank.live || !rank.past_rendezvous) continue;
    RankEvent event;
    event.set_attempt(rank.attempt);
    event.set_global_rank(rank.global_rank);
    event.mutable_progress()->set_step(step);
    PushLocked(std::move(event));
  }
}

void SimulatedAgent::FailRank(int local_rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (SimulatedRank& rank : ranks_) {
      if (!rank.live || rank.local_rank != local_rank) continue;
      RankEnded ended;
      ended.set_state(RANK_EXITED);
      ended.set_exit_code(1);
      ended.add_stderr_tail("simulated failure (dsagent_sim --fail_agent)");
      EndLocked(rank, std::move(ended));
    }
  }
  counters_->Notify();
}

void SimulatedAgent::EndEveryRank() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (SimulatedRank& rank : ranks_) {
      if (!rank.live) continue;
      RankEnded ended;
      ended.set_state(RANK_EXITED);
      ended.set_exit_code(0);
      EndLocked(rank, std::move(ended));
    }
  }
  counters_->Notify();
}

}  // namespace dslaunch::scale
