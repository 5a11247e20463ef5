// Note [Agent simulator]: many simulated agents in one process, to measure
// the control plane (dslaunch's controller and its rendezvous store) at
// cluster scale on one machine.
//
// A SimulatedAgent speaks the agent's whole protocol (proto/agent.proto) to a
// real dslaunch, on a port of its own, but starts no processes: each rank of
// a StartRanks is a small state machine that does on the real store what a
// rank of a 3-D job does before its first step:
//   - the NCCL unique-id exchange of the world group, of its tensor-parallel
//     group (the ranks of its host) and of its data-parallel group (the ranks
//     of its local index on every host): the group's first member Sets
//     "comm/<group>/nccl_unique_id" (128 bytes, as ncclUniqueId), every other
//     member Waits for the key and Gets it (runtime/comm/nccl_communicator.cc);
//   - over its own channel (its own connection, as a rank process has), with
//     the attempt's store token and scope from the rank environment.
// Once past rendezvous a rank sends what a real agent forwards of it: a
// RankProgress on the Watch stream every heartbeat interval (Note [Rank
// heartbeats], agent/agent_service.h). A StopJob ends the ranks at once, as
// SIGTERM on a well-behaved rank would; the simulation ends a rank by
// itself (FailRank, EndEveryRank) to play a crash or a finished job.
//
// What is not simulated: process start (the real agent's cost per host,
// measured by tests/integration/test_big_host.sh), rank output lines,
// Diagnose's stacks, authentication (the simulated agents accept any token:
// the gate's cost is one string compare per call).
//
// All callbacks run on gRPC's threads and never block: the whole fleet of
// 1,000 agents x 8 ranks needs no thread per agent, per rank or per call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/agent.grpc.pb.h"
#include "proto/store.grpc.pb.h"

namespace dslaunch::scale {

// What the whole simulation saw, for the benchmark's report (microseconds of
// the wall clock, 0 while it has not happened).
struct SimulationCounters {
  std::atomic<int64_t> first_call_us{0};          // the first RPC from the controller
  std::atomic<int64_t> last_describe_us{0};        // the last Describe answered
  std::atomic<int64_t> first_watch_us{0};          // the first Watch opened
  std::atomic<int64_t> first_start_ranks_us{0};    // the first StartRanks received
  std::atomic<int64_t> last_start_ranks_us{0};     // the last StartRanks answered
  std::atomic<int64_t> rendezvous_done_us{0};      // the last rank past rendezvous
  std::atomic<int64_t> last_stop_us{0};            // the last StopJob answered
  std::atomic<int64_t> ranks_started{0};
  std::atomic<int64_t> ranks_past_rendezvous{0};
  std::atomic<int64_t> ranks_ended{0};
  std::atomic<int64_t> ranks_failed_rendezvous{0};
  std::atomic<int64_t> store_calls{0};             // every store RPC a rank made
  std::atomic<int64_t> watch_events{0};            // every RankEvent queued for a watcher
  std::atomic<int64_t> stop_calls{0};
  std::mutex mu;
  std::condition_variable changed;  // notified when a rank passes rendezvous or ends
  std::string first_rendezvous_error;  // guarded by mu
  void Notify();
};

int64_t NowUnixMicros();

class WatchStream;

class SimulatedAgent final : public Agent::CallbackService {
 public:
  SimulatedAgent(int index, int gpu_count, SimulationCounters* counters);
  ~SimulatedAgent() override;

  // One RankProgress per live rank past rendezvous, with `step`.
  void SendHeartbeats(int64_t step);
  // Ends local rank `local_rank` as a crash would: exit code 1.
  void FailRank(int local_rank);
  // Ends every live rank with exit code 0, as a finished job.
  void EndEveryRank();

  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* context,
                                     const DescribeRequest* request, DescribeReply* reply) override;
  grpc::ServerUnaryReactor* ReservePort(grpc::CallbackServerContext* context,
                                        const ReservePortRequest* request,
                                        ReservePortReply* reply) override;
  grpc::ServerUnaryReactor* StartRanks(grpc::CallbackServerContext* context,
                                       const StartRanksRequest* request,
                                       StartRanksReply* reply) override;
  grpc::ServerUnaryReactor* StopJob(grpc::CallbackServerContext* context,
                                    const StopJobRequest* request, StopJobReply* reply) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* context,
                                      const KeepAliveRequest* request,
                                      KeepAliveReply* reply) override;
  grpc::ServerWriteReactor<RankEvent>* Watch(grpc::CallbackServerContext* context,
                                             const WatchRequest* request) override;
  grpc::ServerUnaryReactor* Diagnose(grpc::CallbackServerContext* context,
                                     const DiagnoseRequest* request,
                                     DiagnoseReply* reply) override;

 private:
  friend class WatchStream;
  friend struct RankRendezvous;

  struct SimulatedRank {
    int attempt = 0;
    int global_rank = 0;
    int local_rank = 0;
    bool live = true;
    bool past_rendezvous = false;
  };

  // Queues `event` for the watcher, or until one comes (guarded by mu_).
  void PushLocked(RankEvent event);
  void EndLocked(SimulatedRank& rank, RankEnded ended);
  void Detach(WatchStream* stream);
  // Called by a rank's rendezvous when it is through (or failed: `error`).
  void RendezvousDone(int rank_index, const std::string& error);
  void CountFirstCall();
  bool IsLive(int rank_index);

  const int index_;
  const int gpu_count_;
  SimulationCounters* const counters_;
  std::mutex mu_;
  std::vector<SimulatedRank> ranks_;     // guarded by mu_
  std::deque<RankEvent> pending_;        // before a watcher came; guarded by mu_
  WatchStream* watcher_ = nullptr;       // guarded by mu_
};

}  // namespace dslaunch::scale
