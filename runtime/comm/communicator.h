// One interface for every collective the runtime uses, with a Gloo backend
// for CPU tensors and a NCCL backend for CUDA tensors. Both rendezvous through
// the control plane's store (Note [Rank environment contract]).
//
// Calls are collective: every member of the group makes the same calls in the
// same order. They block until the result is in place (on GPU: until it is
// enqueued on the current stream, which orders it before later kernels).
// Not thread-safe: one thread per communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace dslaunch {
class StoreClient;
}

namespace dslaunch::runtime {

enum class ReduceOp { kSum, kMax, kMin };

// One point-to-point transfer of a SendRecv batch.
struct PeerTransfer {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  torch::Tensor tensor;  // contiguous; sent from, or received into
  int peer = 0;          // index in the group
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // index in the group
  virtual int size() const = 0;
  virtual const std::string& backend() const = 0;

  // In place.
  virtual absl::Status AllReduce(torch::Tensor& tensor, ReduceOp op) = 0;
  // `input` holds size() equal chunks; chunk i, reduced over the group, lands
  // in `output` of rank i.
  virtual absl::Status ReduceScatter(const torch::Tensor& input, torch::Tensor& output,
                                     ReduceOp op) = 0;
  // `output` holds size() chunks: chunk i is rank i's `input`.
  virtual absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) = 0;
  virtual absl::Status Broadcast(torch::Tensor& tensor, int root) = 0;
  virtual absl::Status Send(const torch::Tensor& tensor, int peer) = 0;
  virtual absl::Status Recv(torch::Tensor& tensor, int peer) = 0;
  // Posts every transfer of the batch, then waits for all of them (the
  // counterpart of torch.distributed.batch_isend_irecv): a rank may send to
  // and receive from a peer that does the same without deadlock, which
  // blocking Send then Recv would not allow. Not a collective: only the
  // peers named take part. Transfers from one rank to another pair up in the
  // order each side posts them, over all of their batches (NCCL has no
  // tags), so both sides must list them in the same order.
  virtual absl::Status SendRecv(std::vector<PeerTransfer>& transfers) = 0;
  // `input` and `output` hold size() equal chunks; chunk j of rank i's input
  // lands in chunk i of rank j's output.
  virtual absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output) = 0;
  virtual absl::Status Barrier() = 0;
};

enum class CommBackend { kGloo, kNccl };

struct GroupSpec {
  std::string name;           // unique per group within a job attempt, e.g. "world", "dp.0"
  std::vector<int> members;   // global ranks, ascending
  int global_rank = 0;        // this process
};

// This process's index in the group; InvalidArgument naming the group when
// it is not a member.
absl::StatusOr<int> IndexInGroup(const GroupSpec& group);

// Creates this rank's member of the group. All members call it with the same
// name and members. The NCCL backend exists only in builds with CUDA.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(CommBackend backend,
                                                                 StoreClient& store,
                                                                 const GroupSpec& group);

}  // namespace dslaunch::runtime
