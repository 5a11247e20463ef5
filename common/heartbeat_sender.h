// A rank's side of Note [Rank heartbeats] (agent/agent_service.h): a thread
// that reports the rank's step and recent collectives to its agent every
// DSLAUNCH_HEARTBEAT_MS. Every rank that starts through the runtime's
// bootstrap (dsrank, programs using <dslaunch/runtime.h>) runs one; any other
// program started by dslaunch can too (link dscommon), or do without and be
// judged by its process state.
//
//   std::atomic<int64_t> step{-1};
//   auto heartbeats = HeartbeatSender::Start(
//       *ReadRankEnvironment(), [&](HeartbeatRequest* beat) { beat->set_step(step.load()); });
//
// The thread keeps beating while the rank's main thread is stuck (in a
// collective, say): a missed heartbeat means the whole process is frozen.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "proto/agent.grpc.pb.h"

namespace dslaunch {

struct RankEnvironment;

class HeartbeatSender {
 public:
  // Fills the step and collectives of one heartbeat (called on the sender's thread).
  using Snapshot = std::function<void(HeartbeatRequest*)>;

  // Heartbeats are sent at least this far apart, whatever DSLAUNCH_HEARTBEAT_MS says.
  static constexpr int kMinimumIntervalMs = 50;

  // nullptr when the rank was not started by a dsagent (the contract has no
  // agent address or rank token); an error naming DSLAUNCH_TLS_DIR when its
  // TLS folder cannot be read (Note [Mutual TLS]).
  static absl::StatusOr<std::unique_ptr<HeartbeatSender>> Start(const RankEnvironment& env, Snapshot snapshot);
  // Plaintext unless `credentials` are given.
  HeartbeatSender(std::string agent_address, HeartbeatRequest identity, std::chrono::milliseconds interval,
                  Snapshot snapshot, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~HeartbeatSender();  // stops and joins the thread

  // Heartbeats the agent accepted so far (tests).
  int64_t accepted() const;
  // Sends the next heartbeat now instead of at the end of the interval (a
  // rank's first finished step: the controller times recovery from it, and an
  // attempt whose few steps fit in one interval would otherwise report none).
  void SendSoon();

 private:
  void Loop();

  const HeartbeatRequest identity_;  // job, attempt, rank, token
  const std::chrono::milliseconds interval_;
  const Snapshot snapshot_;
  std::unique_ptr<Agent::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  bool send_soon_ = false;  // guarded by mu_
  int64_t accepted_ = 0;   // guarded by mu_
  std::thread thread_;
};

}  // namespace dslaunch
