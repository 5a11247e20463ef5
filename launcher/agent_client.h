// The controller's view of one dsagent (STYLE.md 4: interface, gRPC client,
// fake for tests in fake_agent_client.h).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace dslaunch {

class AgentClient {
 public:
  using EventHandler = std::function<void(RankEvent)>;
  // Called once when the event stream ends for any reason other than StopWatch.
  using LostHandler = std::function<void(absl::Status)>;

  virtual ~AgentClient() = default;

  // The host as the user named it (hostfile, --agents, or "nodeN" locally).
  virtual const std::string& host() const = 0;

  virtual absl::StatusOr<DescribeReply> Describe() = 0;
  virtual absl::StatusOr<int> ReservePort() = 0;
  virtual absl::Status StartRanks(const StartRanksRequest& request) = 0;
  virtual absl::Status StopJob(const std::string& job_id, int attempt,
                               std::chrono::milliseconds grace, const std::string& reason) = 0;
  virtual absl::Status KeepAlive(const std::string& job_id) = 0;
  // KeepAlive without waiting: `done` runs once with its answer, on a thread
  // of the client (or before this returns), never on the caller's while it
  // waits for anything; the client's destructor returns only after every
  // `done` has (so `done` must not destroy its client). One controller thread keeps every agent alive this
  // way (Note [Agent calls without a thread], grpc_agent_client.h).
  virtual void KeepAliveAsync(const std::string& job_id, std::function<void(absl::Status)> done) = 0;
  // Native stacks and last heartbeats of the attempt's live ranks on this host.
  virtual absl::StatusOr<DiagnoseReply> Diagnose(const std::string& job_id, int attempt) = 0;

  // Opens the job's event stream (request.job_id; with request.replay, the
  // starts and ends the stream missed first, Note [Controller failover]);
  // returns once the agent has accepted it, so no event of ranks started
  // afterwards can be missed. Handlers run on a thread of the client, one
  // at a time and in the stream's order; they must not block.
  virtual absl::Status StartWatch(const WatchRequest& request, EventHandler on_event,
                                  LostHandler on_lost) = 0;
  // Closes the stream and waits for the handler thread; no handler runs afterwards.
  virtual void StopWatch() = 0;
};

}  // namespace dslaunch
