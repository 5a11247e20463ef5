// The Gloo backend: c10d's ProcessGroupGloo (part of Debian's LibTorch and of
// every PyTorch build) over CPU tensors, rendezvousing through StoreAdapter.
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/group_arrival.h"
#include "runtime/comm/store_adapter.h"

namespace dslaunch::runtime {
namespace {

// Note [LibTorch's flight recorder off]
// From LibTorch 2.x, ProcessGroupGloo::enqueue records every collective in
// c10d's process-wide FlightRecorder, whose recordWithResetEnabled looks up
// and inserts the group's status in a std::map before taking its mutex. Two
// groups enqueueing at once from two threads (a tensor and a data group
// from the engine's threads; ranks run as threads in the parity tests)
// corrupt the map: on the GPU host's LibTorch 2.11 the in-process tensor-
// and expert-parallel tests crashed inside it (the stack:
// ProcessGroupGloo::enqueue -> FlightRecorder::recordWithResetEnabled ->
// _Rb_tree_insert_and_rebalance). Its buffer size 0 (TORCH_FR_BUFFER_SIZE; the older name warns as
// deprecated) turns the recorder off
// before it is first used, so it returns before touching the map. Hang
// diagnosis uses our own recorder (comm/flight_recorder.h); LibTorch 1.13
// has no such recorder and ignores the variable. Set while the program is
// still one thread (static initialisation), overriding a caller's value: any
// other value can crash the process.
[[maybe_unused]] const bool kLibTorchFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
  return true;
}();

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    default:
      return c10d::ReduceOp::SUM;
  }
}

// Runs a c10d call and waits for it; exceptions become a Status naming the op.
template <typename Call>
absl::Status Run(const char* op, Call&& call) {
  try {
    auto work = call();
    if (work) work->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", op, ": ", e.what()));
  }
}

// The address peers can reach this rank at: GLOO_SOCKET_IFNAME when set (as
// in PyTorch), else the local address toward MASTER_ADDR (the network the job
// uses), else loopback.
std::shared_ptr<::gloo::transport::Device> MakeDevice() {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  std::string address = "127.0.0.1";
  if (const char* master = std::getenv("MASTER_ADDR"); master && *master) {
    auto toward = LocalAddressToward(master);
    if (toward.ok()) address = *toward;
  }
  return c10d::ProcessGroupGloo::createDeviceForHostname(address);
}

// Gloo has no bfloat16 arithmetic: such tensors travel as fp32 (exact for
// the values; sums then round once when copied back).
bool NeedsWidening(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16; }

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous under `prefix` in `client`'s namespace; waits for every
  // member's (Note [Connected before anyone leaves] in group_arrival.h).
  GlooCommunicator(StoreClient& client, const std::string& prefix, int rank, int size)
      : store_(c10::make_intrusive<StoreAdapter>(client, prefix)), rank_(rank), size_(size) {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->devices.push_back(MakeDevice());
    // Failures are the controller's to detect (fail-fast); this only bounds a
    // rendezvous that can never complete.
    options->timeout = std::chrono::minutes(10);
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, options);
    } catch (const std::exception& e) {
      if (size > 1) (void)RecordGroupArrival(client, prefix, rank, absl::UnavailableError(e.what()));
      throw;
    }
    if (size == 1) return;
    absl::Status arrived = RecordGroupArrival(client, prefix, rank, absl::OkStatus());
    if (arrived.ok()) arrived = AwaitGroupArrivals(client, prefix, size, options->timeout);
    if (!arrived.ok()) throw std::runtime_error(std::string(arrived.message()));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return name_; }

  absl::Status AllReduce(torch::Tensor& tensor, ReduceOp op) override {
    if (NeedsWidening(tensor)) {
      torch::Tensor wide = tensor.to(torch::kFloat);
      absl::Status reduced = AllReduce(wide, op);
      if (reduced.ok()) tensor.copy_(wide);
      return reduced;
    }
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = ToC10d(op);
    return Run("all_reduce", [&] { return group_->allreduce(tensors, options); });
  }

  absl::Status ReduceScatter(const torch::Tensor& input, torch::Tensor& output,
                             ReduceOp op) override {
    // Gloo has no reduce-scatter in LibTorch 1.13: all-reduce and keep our
    // chunk. Same result; the CPU path pays twice the bytes.
    torch::Tensor reduced = input.clone();
    absl::Status reduced_ok = AllReduce(reduced, op);
    if (!reduced_ok.ok()) return reduced_ok;
    output.copy_(reduced.chunk(size_)[rank_].view_as(output));
    return absl::OkStatus();
  }

  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    if (NeedsWidening(input)) {
      torch::Tensor wide = torch::empty(output.sizes(), output.options().dtype(torch::kFloat));
      absl::Status gathered = AllGather(input.to(torch::kFloat), wide);
      if (gathered.ok()) output.copy_(wide);
      return gathered;
    }
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (auto& chunk : output.chunk(size_)) outputs[0].push_back(chunk.view_as(input));
    return Run("all_gather", [&] { return group_->allgather(outputs, inputs); });
  }

  absl::Status Broadcast(torch::Tensor& tensor, int root) override {
    if (NeedsWidening(tensor)) {
      torch::Tensor wide = tensor.to(torch::kFloat);
      absl::Status sent = Broadcast(wide, root);
      if (sent.ok()) tensor.copy_(wide);
      return sent;
    }
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return Run("broadcast", [&] { return group_->broadcast(tensors, options); });
  }

  absl::Status Send(const torch::Tensor& tensor, int peer) override {
    std::vector<at::Tensor> tensors{tensor};
    return Run("send", [&] { return group_->send(tensors, peer, /*tag=*/0); });
  }

  absl::Status Recv(torch::Tensor& tensor, int peer) override {
    std::vector<at::Tensor> tensors{tensor};
    return Run("recv", [&] { return group_->recv(tensors, peer, /*tag=*/0); });
  }

  absl::Status SendRecv(std::vector<PeerTransfer>& transfers) override {
    try {
      // c10d's work handle (its type's name differs between LibTorch versions).
      using WorkHandle = decltype(group_->send(std::declval<std::vector<at::Tensor>&>(), 0, 0));
      std::vector<WorkHandle> posted;
      std::vector<std::vector<at::Tensor>> tensor_lists;  // alive until the waits
      tensor_lists.reserve(transfers.size());
      for (PeerTransfer& transfer : transfers) {
        std::vector<at::Tensor>& tensors = tensor_lists.emplace_back(1, transfer.tensor);
        posted.push_back(transfer.kind == PeerTransfer::Kind::kSend ? group_->send(tensors, transfer.peer, /*tag=*/0)
                                                                    : group_->recv(tensors, transfer.peer, /*tag=*/0));
      }
      for (auto& work : posted) work->wait();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("gloo send_recv: ", e.what()));
    }
  }

  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output) override {
    at::Tensor in = input, out = output;
    std::vector<int64_t> even;
    return Run("all_to_all", [&] { return group_->alltoall_base(out, in, even, even); });
  }

  absl::Status Barrier() override {
    return Run("barrier", [&] { return group_->barrier(); });
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int size_;
  const std::string name_ = "gloo";
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(StoreClient& store,
                                                                     const GroupSpec& group) {
  auto index = IndexInGroup(group);
  if (!index.ok()) return index.status();
  const int rank = *index;
  try {
    return std::unique_ptr<Communicator>(new GlooCommunicator(store, absl::StrCat("comm/", group.name, "/"), rank,
                                                              static_cast<int>(group.members.size())));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gloo group ", group.name, ": rendezvous failed: ", e.what()));
  }
}

}  // namespace dslaunch::runtime
