#include "runtime/comm/flight_recorder.h"

#include "absl/time/clock.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

int64_t Bytes(const torch::Tensor& tensor) { return tensor.numel() * tensor.element_size(); }

}  // namespace

void RecordingCommunicator::WaitForDevice(const torch::Device& device) { compat::SynchronizeDevice(device); }

int64_t FlightRecorder::Begin(const std::string& group, const char* op, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRecord record;
  auto [next, inserted] = next_seq_.try_emplace(group, 1);
  record.set_seq(next->second++);
  record.set_op(op);
  record.set_group(group);
  record.set_bytes(bytes);
  record.set_started_unix_us(absl::ToUnixMicros(absl::Now()));
  calls_.push_back(std::move(record));
  call_ids_.push_back(next_call_++);
  starts_.push_back(std::chrono::steady_clock::now());
  while (calls_.size() > kCapacity) {
    calls_.pop_front();
    call_ids_.pop_front();
    starts_.pop_front();
  }
  return call_ids_.back();
}

void FlightRecorder::End(int64_t call) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = calls_.size(); i-- > 0;) {
    if (call_ids_[i] != call) continue;
    calls_[i].set_completed(true);
    calls_[i].set_duration_us(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - starts_[i]).count());
    return;
  }
}

void FlightRecorder::Snapshot(google::protobuf::RepeatedPtrField<CollectiveRecord>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out->Clear();
  for (const auto& call : calls_) *out->Add() = call;
}

absl::Status RecordingCommunicator::AllReduce(torch::Tensor& tensor, ReduceOp op) {
  return Record("all_reduce", Bytes(tensor), tensor.device(), [&] { return inner_->AllReduce(tensor, op); });
}
absl::Status RecordingCommunicator::ReduceScatter(const torch::Tensor& input, torch::Tensor& output,
                                                  ReduceOp op) {
  return Record("reduce_scatter", Bytes(input), input.device(), [&] { return inner_->ReduceScatter(input, output, op); });
}
absl::Status RecordingCommunicator::AllGather(const torch::Tensor& input, torch::Tensor& output) {
  return Record("all_gather", Bytes(output), output.device(), [&] { return inner_->AllGather(input, output); });
}
absl::Status RecordingCommunicator::Broadcast(torch::Tensor& tensor, int root) {
  return Record("broadcast", Bytes(tensor), tensor.device(), [&] { return inner_->Broadcast(tensor, root); });
}
absl::Status RecordingCommunicator::Send(const torch::Tensor& tensor, int peer) {
  return Record("send", Bytes(tensor), tensor.device(), [&] { return inner_->Send(tensor, peer); });
}
absl::Status RecordingCommunicator::Recv(torch::Tensor& tensor, int peer) {
  return Record("recv", Bytes(tensor), tensor.device(), [&] { return inner_->Recv(tensor, peer); });
}
absl::Status RecordingCommunicator::SendRecv(std::vector<PeerTransfer>& transfers) {
  int64_t bytes = 0;
  for (const PeerTransfer& transfer : transfers) bytes += Bytes(transfer.tensor);
  return Record("send_recv", bytes, transfers.empty() ? torch::Device(torch::kCPU) : transfers[0].tensor.device(), [&] { return inner_->SendRecv(transfers); });
}
absl::Status RecordingCommunicator::AllToAll(const torch::Tensor& input, torch::Tensor& output) {
  return Record("all_to_all", Bytes(input), input.device(), [&] { return inner_->AllToAll(input, output); });
}
absl::Status RecordingCommunicator::Barrier() {
  return Record("barrier", 0, torch::Device(torch::kCPU), [&] { return inner_->Barrier(); });
}

}  // namespace dslaunch::runtime
