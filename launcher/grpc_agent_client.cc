#include "launcher/grpc_agent_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "common/grpc_status.h"

namespace dslaunch {
namespace {

std::string ThisProcessName() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrCat("dslaunch pid ", ::getpid(), " on ", host);
}

}  // namespace

GrpcAgentClient::GrpcAgentClient(std::string host, const std::string& address, std::string token,
                                 std::string job_credential,
                                 std::shared_ptr<grpc::ChannelCredentials> credentials,
                                 std::chrono::milliseconds call_timeout, std::chrono::milliseconds keepalive)
    : host_(std::move(host)),
      address_(address),
      token_(std::move(token)),
      job_credential_(std::move(job_credential)),
      requester_(ThisProcessName()),
      call_timeout_(call_timeout) {
  grpc::ChannelArguments args;
  // Notice a dead peer on an idle connection within seconds, not hours: a
  // ping every `keepalive` (a quarter of the lease), answered within twice
  // that, so a dead agent is noticed within three quarters of the lease. An
  // answer within one interval was too tight at scale: with 1,000 agents on
  // a loaded controller, pings answered late broke healthy connections
  // (scripts/control-plane-scale.sh).
  const int keepalive_ms = static_cast<int>(std::max<int64_t>(250, keepalive.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2 * keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A connection attempt whose first packet is lost (a host or bridge coming
  // up) is abandoned after 1 s and retried quickly, instead of gRPC's default
  // 20 s minimum connect timeout outliving the call's deadline.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  stub_ = Agent::NewStub(
      grpc::CreateCustomChannel(address, credentials != nullptr ? std::move(credentials)
                                                                : grpc::InsecureChannelCredentials(),
                                args));
}

void GrpcAgentClient::AttachCredentials(grpc::ClientContext* context) const {
  AttachToken(context, token_);
  if (!job_credential_.empty()) AttachJobToken(context, job_credential_);
}

void GrpcAgentClient::Prepare(grpc::ClientContext* context) const {
  AttachCredentials(context);
  context->set_deadline(std::chrono::system_clock::now() + call_timeout_);
}

absl::Status GrpcAgentClient::Annotate(const grpc::Status& status, const char* method) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted = FromGrpcStatus(status);
  return absl::Status(converted.code(), absl::StrCat("agent ", host_, " (", address_, ") ", method,
                                                     ": ", converted.message()));
}

absl::StatusOr<DescribeReply> GrpcAgentClient::Describe() {
  grpc::ClientContext context;
  Prepare(&context);
  // The first call may race the agent's start-up; wait for the channel.
  context.set_wait_for_ready(true);
  DescribeReply reply;
  absl::Status status = Annotate(stub_->Describe(&context, DescribeRequest(), &reply), "Describe");
  if (absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status)) {
    // A handshake that fails (TLS on one side only, another CA, a name the
    // agent's certificate lacks) looks the same as nobody listening.
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), ": no connection to the agent within ",
                                     call_timeout_.count(), " ms; is it running at that address, and do both "
                                     "sides agree on --tls_dir (Note [Mutual TLS]: the same CA, a certificate "
                                     "naming ", address_.substr(0, address_.rfind(':')), ")?"));
  }
  if (!status.ok()) return status;
  return reply;
}

absl::StatusOr<int> GrpcAgentClient::ReservePort() {
  grpc::ClientContext context;
  Prepare(&context);
  ReservePortReply reply;
  absl::Status status =
      Annotate(stub_->ReservePort(&context, ReservePortRequest(), &reply), "ReservePort");
  if (!status.ok()) return status;
  return reply.port();
}

std::chrono::milliseconds GrpcAgentClient::StartRanksDeadline(std::chrono::milliseconds call_timeout,
                                                             int ranks) {
  return call_timeout + kStartAllowancePerRank * std::max(0, ranks);
}

absl::Status GrpcAgentClient::StartRanks(const StartRanksRequest& request) {
  grpc::ClientContext context;
  AttachCredentials(&context);
  context.set_deadline(std::chrono::system_clock::now() +
                       StartRanksDeadline(call_timeout_, request.ranks_size()));
  StartRanksReply reply;
  absl::Status status = Annotate(stub_->StartRanks(&context, request, &reply), "StartRanks");
  if (status.ok() && request.common_env_size() > 0 && !reply.common_env_applied()) {
    // Its ranks started without the shared environment: they are stopped
    // with the attempt.
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", host_, " (", address_, ") is older than this dslaunch: it ignored the ranks' "
        "shared environment (StartRanksRequest.common_env); run the dsagent of this release there"));
  }
  if (status.ok() && !request.run_as().empty() && !reply.run_as_applied()) {
    // Note [Ranks as another user]: its ranks run as the agent's user, not
    // the one asked for; they are stopped with the attempt.
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", host_, " (", address_, ") is older than this dslaunch: it ignored --run_as ", request.run_as(),
        " (StartRanksRequest.run_as) and started the ranks as its own user; run the dsagent of this release there"));
  }
  return status;
}

absl::Status GrpcAgentClient::StopJob(const std::string& job_id, int attempt,
                                      std::chrono::milliseconds grace, const std::string& reason) {
  grpc::ClientContext context;
  Prepare(&context);
  StopJobRequest request;
  request.set_job_id(job_id);
  request.set_attempt(attempt);
  request.set_grace_ms(grace.count());
  request.set_reason(reason);
  request.set_requester(requester_);
  StopJobReply reply;
  return Annotate(stub_->StopJob(&context, request, &reply), "StopJob");
}

absl::StatusOr<DiagnoseReply> GrpcAgentClient::Diagnose(const std::string& job_id, int attempt) {
  grpc::ClientContext context;
  AttachCredentials(&context);
  // Stack dumps take a moment per rank: longer than an ordinary call.
  context.set_deadline(std::chrono::system_clock::now() + call_timeout_ + std::chrono::seconds(30));
  DiagnoseRequest request;
  request.set_job_id(job_id);
  request.set_attempt(attempt);
  DiagnoseReply reply;
  absl::Status status = Annotate(stub_->Diagnose(&context, request, &reply), "Diagnose");
  if (!status.ok()) return status;
  return reply;
}

absl::Status GrpcAgentClient::KeepAlive(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(&context);
  KeepAliveRequest request;
  request.set_job_id(job_id);
  KeepAliveReply reply;
  return Annotate(stub_->KeepAlive(&context, request, &reply), "KeepAlive");
}

void GrpcAgentClient::KeepAliveAsync(const std::string& job_id, std::function<void(absl::Status)> done) {
  // Owned by the callback, which gRPC calls once when the call is over.
  struct Call {
    grpc::ClientContext context;
    KeepAliveRequest request;
    KeepAliveReply reply;
    std::function<void(absl::Status)> done;
  };
  auto* call = new Call;
  Prepare(&call->context);
  call->request.set_job_id(job_id);
  call->done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    ++async_calls_;
  }
  stub_->async()->KeepAlive(&call->context, &call->request, &call->reply, [this, call](grpc::Status status) {
    // The call's context goes before anyone hears the answer: a caller that
    // then drops the client (its channel) must find no call of it left.
    const absl::Status answer = Annotate(status, "KeepAlive");
    std::function<void(absl::Status)> done = std::move(call->done);
    delete call;
    done(answer);
    // Notified under the lock: the destructor may free the client once it
    // sees the count reach zero, and nothing here touches it afterwards.
    std::lock_guard<std::mutex> lock(async_mu_);
    --async_calls_;
    async_changed_.notify_all();
  });
}

// The event stream as a read reactor (Note [Agent calls without a thread]).
// The first event must be the agent's `accepted`; every later one goes to
// the handler, one read at a time. OnDone is the last call gRPC makes on it.
class GrpcAgentClient::WatchCall final : public grpc::ClientReadReactor<RankEvent> {
 public:
  WatchCall(const GrpcAgentClient& client, WatchRequest request, EventHandler on_event, LostHandler on_lost)
      : client_(client), request_(std::move(request)), on_event_(std::move(on_event)), on_lost_(std::move(on_lost)) {
    client_.AttachCredentials(&context_);
  }

  void Start(Agent::Stub& stub) {
    stub.async()->Watch(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  // The agent's acceptance, or why there was none; false when `timeout`
  // passed first.
  bool WaitAccepted(std::chrono::milliseconds timeout, absl::Status* status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return accepted_.has_value(); })) return false;
    *status = *accepted_;
    return true;
  }

  // Ends the stream without a call to on_lost, and waits for OnDone.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    context_.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return done_; });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    bool accepted_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!accepted_.has_value()) {
        accepted_now = true;
        accepted_ = event_.has_accepted()
                        ? absl::OkStatus()
                        : absl::UnavailableError(absl::StrCat("agent ", client_.host_,
                                                              " sent an event before accepting the stream"));
        changed_.notify_all();
        if (!accepted_->ok()) {
          context_.TryCancel();
          return;
        }
      }
    }
    if (!accepted_now) on_event_(std::move(event_));
    event_.Clear();
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!accepted_.has_value()) {
      accepted_ = status.ok() ? absl::UnavailableError(absl::StrCat("agent ", client_.host_,
                                                                    " closed the event stream at once"))
                              : client_.Annotate(status, "Watch");
    } else if (accepted_->ok() && !stopping_) {
      lock.unlock();
      on_lost_(status.ok() ? absl::UnavailableError(absl::StrCat("agent ", client_.host_, " closed the event stream"))
                           : client_.Annotate(status, "Watch"));
      lock.lock();
    }
    // Notified under the lock: Stop's caller may delete this once it sees
    // done_, and nothing here touches it afterwards.
    done_ = true;
    changed_.notify_all();
  }

 private:
  const GrpcAgentClient& client_;
  grpc::ClientContext context_;
  const WatchRequest request_;
  const EventHandler on_event_;
  const LostHandler on_lost_;
  RankEvent event_;  // the read in flight; touched by one callback at a time

  std::mutex mu_;
  std::condition_variable changed_;
  std::optional<absl::Status> accepted_;  // guarded by mu_
  bool stopping_ = false;                 // guarded by mu_
  bool done_ = false;                     // guarded by mu_
};

absl::Status GrpcAgentClient::StartWatch(const WatchRequest& request, EventHandler on_event,
                                         LostHandler on_lost) {
  StopWatch();
  watch_ = std::make_unique<WatchCall>(*this, request, std::move(on_event), std::move(on_lost));
  watch_->Start(*stub_);
  absl::Status status;
  if (!watch_->WaitAccepted(call_timeout_, &status)) {
    StopWatch();
    return absl::DeadlineExceededError(absl::StrCat("agent ", host_, " (", address_,
                                                    ") did not accept the event stream within ",
                                                    call_timeout_.count(), " ms"));
  }
  if (!status.ok()) StopWatch();
  return status;
}

GrpcAgentClient::~GrpcAgentClient() {
  StopWatch();
  // Every KeepAliveAsync call is over in its deadline (the call timeout).
  std::unique_lock<std::mutex> lock(async_mu_);
  async_changed_.wait(lock, [&] { return async_calls_ == 0; });
}

void GrpcAgentClient::StopWatch() {
  if (watch_ == nullptr) return;
  watch_->Stop();
  watch_.reset();
}

}  // namespace dslaunch
