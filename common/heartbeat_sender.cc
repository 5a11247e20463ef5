#include "common/heartbeat_sender.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>

#include "common/rank_contract.h"
#include "common/tls_files.h"

namespace dslaunch {

absl::StatusOr<std::unique_ptr<HeartbeatSender>> HeartbeatSender::Start(const RankEnvironment& env,
                                                                         Snapshot snapshot) {
  if (!env.has_agent()) return nullptr;
  auto credentials = RankChannelCredentials(env.tls_dir);
  if (!credentials.ok()) return credentials.status();
  HeartbeatRequest identity;
  identity.set_job_id(env.job_id);
  identity.set_attempt(env.attempt);
  identity.set_global_rank(env.rank);
  identity.set_rank_token(env.rank_token);
  const auto interval = std::chrono::milliseconds(std::max(kMinimumIntervalMs, env.heartbeat_ms));
  return std::make_unique<HeartbeatSender>(env.agent_addr, identity, interval, std::move(snapshot),
                                           std::move(*credentials));
}

HeartbeatSender::HeartbeatSender(std::string agent_address, HeartbeatRequest identity,
                                 std::chrono::milliseconds interval, Snapshot snapshot,
                                 std::shared_ptr<grpc::ChannelCredentials> credentials)
    : identity_(std::move(identity)), interval_(interval), snapshot_(std::move(snapshot)) {
  stub_ = Agent::NewStub(grpc::CreateChannel(
      agent_address, credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials()));
  thread_ = std::thread([this] { Loop(); });
}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatSender::SendSoon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    send_soon_ = true;
  }
  wake_.notify_all();
}

int64_t HeartbeatSender::accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

void HeartbeatSender::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    HeartbeatRequest beat = identity_;
    if (snapshot_) snapshot_(&beat);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::max(interval_, std::chrono::milliseconds(500)));
    HeartbeatReply reply;
    // A failed beat is not an error of the rank: the agent judges silence.
    const bool ok = stub_->Heartbeat(&context, beat, &reply).ok();
    lock.lock();
    if (ok) ++accepted_;
    wake_.wait_for(lock, interval_, [this] { return stopping_ || send_soon_; });
    send_soon_ = false;
  }
}

}  // namespace dslaunch
