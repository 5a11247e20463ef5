#include "common/heartbeat_sender.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cstdlib>

#include "absl/strings/numbers.h"

namespace dslaunch {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

int64_t EnvInt(const char* name, int64_t fallback) {
  int64_t value = 0;
  return absl::SimpleAtoi(Env(name), &value) ? value : fallback;
}

}  // namespace

std::unique_ptr<HeartbeatSender> HeartbeatSender::StartFromEnvironment(Snapshot snapshot) {
  const std::string address = Env("DSLAUNCH_AGENT_ADDR");
  const std::string token = Env("DSLAUNCH_RANK_TOKEN");
  if (address.empty() || token.empty()) return nullptr;
  HeartbeatRequest identity;
  identity.set_job_id(Env("DSLAUNCH_JOB_ID"));
  identity.set_attempt(static_cast<int32_t>(EnvInt("DSLAUNCH_ATTEMPT", 0)));
  identity.set_global_rank(static_cast<int32_t>(EnvInt("RANK", 0)));
  identity.set_rank_token(token);
  const auto interval = std::chrono::milliseconds(std::max<int64_t>(50, EnvInt("DSLAUNCH_HEARTBEAT_MS", 1000)));
  return std::make_unique<HeartbeatSender>(address, identity, interval, std::move(snapshot));
}

HeartbeatSender::HeartbeatSender(std::string agent_address, HeartbeatRequest identity,
                                 std::chrono::milliseconds interval, Snapshot snapshot)
    : identity_(std::move(identity)), interval_(interval), snapshot_(std::move(snapshot)) {
  stub_ = Agent::NewStub(grpc::CreateChannel(agent_address, grpc::InsecureChannelCredentials()));
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
