#include "common/store_client.h"

#include <cstdlib>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "common/grpc_status.h"
#include "common/rank_contract.h"
#include "common/tls_files.h"

namespace dslaunch {
namespace {

// Bound for calls that do not wait on other ranks.
constexpr std::chrono::milliseconds kCallDeadline{30000};

// Note [Controller failover]: when the store's dslaunch dies and a new one
// serves the store at the same address, a rank's calls wait for the channel
// (wait_for_ready) and must find the new store within a second, not after
// gRPC's default reconnect backoff (up to two minutes).
std::shared_ptr<grpc::Channel> StoreChannel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(
      address, credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials(), arguments);
}

}  // namespace

StoreClient::StoreClient(const std::string& address, std::string token, std::string job_id,
                         int attempt, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : stub_(Store::NewStub(StoreChannel(address, std::move(credentials)))),
      token_(std::move(token)),
      job_id_(std::move(job_id)),
      attempt_(attempt) {}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::FromEnvironment() {
  absl::StatusOr<RankEnvironment> env = ReadRankEnvironment();
  if (!env.ok()) return env.status();
  return FromContract(*env);
}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::FromContract(const RankEnvironment& env) {
  if (!env.has_store()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "environment variable ", rank_env::kStoreAddr,
        " is not set: this program must be started by dslaunch to use the rendezvous store"));
  }
  auto credentials = RankChannelCredentials(env.tls_dir);
  if (!credentials.ok()) return credentials.status();
  return std::make_unique<StoreClient>(env.store_addr, env.store_token, env.job_id, env.attempt,
                                       std::move(*credentials));
}

void StoreClient::Prepare(grpc::ClientContext* context, std::chrono::milliseconds deadline) const {
  AttachToken(context, token_);
  context->set_deadline(std::chrono::system_clock::now() + deadline);
  // The store is up before any rank starts; waiting for the channel rides
  // over a transient connect failure, and over a controller taken over
  // (Note [Controller failover]) within the deadline.
  context->set_wait_for_ready(true);
}

void StoreClient::FillScope(StoreScope* scope) const {
  scope->set_job_id(job_id_);
  scope->set_attempt(attempt_);
}

absl::Status StoreClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  Prepare(&context, kCallDeadline);
  StoreSetRequest request;
  FillScope(request.mutable_scope());
  request.set_key(key);
  request.set_value(value);
  StoreSetReply reply;
  return FromGrpcStatus(stub_->Set(&context, request, &reply));
}

absl::StatusOr<std::optional<std::string>> StoreClient::Get(const std::string& key) {
  grpc::ClientContext context;
  Prepare(&context, kCallDeadline);
  StoreGetRequest request;
  FillScope(request.mutable_scope());
  request.set_key(key);
  StoreGetReply reply;
  absl::Status status = FromGrpcStatus(stub_->Get(&context, request, &reply));
  if (!status.ok()) return status;
  if (!reply.found()) return std::optional<std::string>();
  return std::optional<std::string>(reply.value());
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  return WaitValues(keys, timeout).status();
}

absl::StatusOr<std::vector<std::string>> StoreClient::WaitValues(const std::vector<std::string>& keys,
                                                                 std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  // The server enforces `timeout`; the RPC deadline only guards a lost server.
  Prepare(&context, timeout + kCallDeadline);
  StoreWaitRequest request;
  FillScope(request.mutable_scope());
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  StoreWaitReply reply;
  absl::Status status = FromGrpcStatus(stub_->Wait(&context, request, &reply));
  if (!status.ok()) return status;
  return std::vector<std::string>(reply.values().begin(), reply.values().end());
}

absl::StatusOr<std::string> StoreClient::WaitGet(const std::string& key,
                                                 std::chrono::milliseconds timeout) {
  auto values = WaitValues({key}, timeout);
  if (!values.ok()) return values.status();
  if (values->size() == 1) return std::move(values->front());
  // A store from before values came with the wait: ask.
  auto value = Get(key);
  if (!value.ok()) return value.status();
  if (!value->has_value()) {
    return absl::AbortedError(absl::StrCat("store key '", key, "' was deleted while waiting"));
  }
  return **value;
}

absl::StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  grpc::ClientContext context;
  Prepare(&context, kCallDeadline);
  StoreAddRequest request;
  FillScope(request.mutable_scope());
  request.set_key(key);
  request.set_delta(delta);
  StoreAddReply reply;
  absl::Status status = FromGrpcStatus(stub_->Add(&context, request, &reply));
  if (!status.ok()) return status;
  return reply.value();
}

absl::StatusOr<StoreClient::CompareSetResult> StoreClient::CompareSet(
    const std::string& key, const std::optional<std::string>& expected, const std::string& desired) {
  grpc::ClientContext context;
  Prepare(&context, kCallDeadline);
  StoreCompareSetRequest request;
  FillScope(request.mutable_scope());
  request.set_key(key);
  if (expected.has_value()) {
    request.set_expected(*expected);
  } else {
    request.set_expect_absent(true);
  }
  request.set_desired(desired);
  StoreCompareSetReply reply;
  absl::Status status = FromGrpcStatus(stub_->CompareSet(&context, request, &reply));
  if (!status.ok()) return status;
  return CompareSetResult{reply.swapped(), reply.value()};
}

absl::StatusOr<bool> StoreClient::Delete(const std::string& key) {
  grpc::ClientContext context;
  Prepare(&context, kCallDeadline);
  StoreDeleteRequest request;
  FillScope(request.mutable_scope());
  request.set_key(key);
  StoreDeleteReply reply;
  absl::Status status = FromGrpcStatus(stub_->Delete(&context, request, &reply));
  if (!status.ok()) return status;
  return reply.deleted();
}

absl::Status StoreClient::Barrier(const std::string& name, int world_size,
                                  std::chrono::milliseconds timeout) {
  const std::string count_key = absl::StrCat("barrier/", name, "/count");
  const std::string done_key = absl::StrCat("barrier/", name, "/done");
  auto arrived = Add(count_key, 1);
  if (!arrived.ok()) return arrived.status();
  if (*arrived > world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "barrier '", name, "': ", *arrived, " arrivals for a world of ", world_size,
        " (a barrier name is single-use)"));
  }
  if (*arrived == world_size) {
    absl::Status set = Set(done_key, "1");
    if (!set.ok()) return set;
  }
  absl::Status waited = Wait({done_key}, timeout);
  if (absl::IsDeadlineExceeded(waited)) {
    return absl::DeadlineExceededError(absl::StrCat("barrier '", name, "': not every one of ",
                                                    world_size, " ranks arrived within ",
                                                    timeout.count(), " ms"));
  }
  return waited;
}

}  // namespace dslaunch
