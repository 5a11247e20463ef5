// A flight recorder for collectives (c10d's idea, for Note [Rank heartbeats]):
// RecordingCommunicator wraps any Communicator and numbers every call; the
// last kCapacity calls are kept with their size, start time, duration and
// whether they finished. Every rank of a group numbers the same calls the
// same way, so when a job hangs, the rank whose newest number is behind the
// others' is the one that never arrived (launcher/hang_diagnosis.h).
//
// Note [Per-group collective numbers]: one recorder serves every
// communicator of a rank (runtime/parallel), and numbers each group's calls
// on their own: 1, 2, ... per group name ("world", "tensor.1", "data.0",
// ...), so the members of a group number the same calls alike even when the
// tensor, pipeline and expert axes make ranks' whole call sequences differ.
// Each record names its group; hang diagnosis compares numbers only within
// a group. The last kCapacity calls of the rank, all groups together, are
// kept.
//
// Thread-safe: the heartbeat thread takes snapshots while the training thread
// is inside a call.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "proto/agent.pb.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/comms_logger.h"

namespace dslaunch::runtime {

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 16;

  // Records a call's start; returns what End takes. The record's number is
  // the group's next (1, 2, ...).
  int64_t Begin(const std::string& group, const char* op, int64_t bytes);
  void End(int64_t call);
  // The recorded calls, oldest first.
  void Snapshot(google::protobuf::RepeatedPtrField<CollectiveRecord>* out) const;

  // Note [Comms logger]: from now on, the calls `logger` wants are timed
  // into it (null: none). `logger` must outlive the communicators' calls.
  void AttachCommsLogger(CommsLogger* logger) { comms_logger_.store(logger, std::memory_order_release); }
  CommsLogger* comms_logger() const { return comms_logger_.load(std::memory_order_acquire); }

 private:
  std::atomic<CommsLogger*> comms_logger_{nullptr};
  mutable std::mutex mu_;
  std::map<std::string, int64_t> next_seq_;  // by group; guarded by mu_
  int64_t next_call_ = 1;                    // guarded by mu_
  std::deque<CollectiveRecord> calls_;       // guarded by mu_
  // Parallel to calls_, guarded by mu_:
  std::deque<int64_t> call_ids_;
  std::deque<std::chrono::steady_clock::time_point> starts_;
};

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, FlightRecorder* recorder,
                        std::string group = "world")
      : inner_(std::move(inner)), recorder_(recorder), group_(std::move(group)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& backend() const override { return inner_->backend(); }

  absl::Status AllReduce(torch::Tensor& tensor, ReduceOp op) override;
  absl::Status ReduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) override;
  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override;
  absl::Status Broadcast(torch::Tensor& tensor, int root) override;
  absl::Status Send(const torch::Tensor& tensor, int peer) override;
  absl::Status Recv(torch::Tensor& tensor, int peer) override;
  absl::Status SendRecv(std::vector<PeerTransfer>& transfers) override;
  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output) override;
  absl::Status Barrier() override;

 private:
  // `device`: where the call's tensors live (the logger waits for it).
  template <typename Call>
  absl::Status Record(const char* op, int64_t bytes, const torch::Device& device, Call call) {
    // The record ends however the call does, a thrown c10::Error included.
    struct Ending {
      FlightRecorder* recorder;
      int64_t call;
      ~Ending() { recorder->End(call); }
    } ending{recorder_, recorder_->Begin(group_, op, bytes)};
    CommsLogger* logger = recorder_->comms_logger();
    if (logger != nullptr && logger->Wants(op)) return TimedCall(logger, op, bytes, device, call);
    return call();
  }
  template <typename Call>
  absl::Status TimedCall(CommsLogger* logger, const char* op, int64_t bytes, const torch::Device& device, Call call) {
    WaitForDevice(device);
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = call();
    WaitForDevice(device);
    logger->Record(op, group_, size(), bytes,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return status;
  }
  static void WaitForDevice(const torch::Device& device);

  std::unique_ptr<Communicator> inner_;
  FlightRecorder* const recorder_;
  const std::string group_;
};

}  // namespace dslaunch::runtime
