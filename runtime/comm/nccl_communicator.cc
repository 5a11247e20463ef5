// The NCCL backend over CUDA tensors. Each group's first member creates the
// NCCL unique id and publishes it in the rendezvous store; the others wait for
// it there. Collectives are enqueued on LibTorch's current CUDA stream
// (Note [CUDA in the LibTorch build]).
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/store_client.h"
#include "runtime/comm/communicator.h"
#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_NCCL)
#include <nccl.h>
#endif

namespace dslaunch::runtime {

#if defined(DSLAUNCH_HAVE_NCCL)
namespace {

// NCCL_CHECK: a failed NCCL call becomes a Status naming the call, file and line.
#define DS_NCCL_CHECK(call)                                                              \
  do {                                                                                   \
    ncclResult_t ds_nccl_result_ = (call);                                               \
    if (ds_nccl_result_ != ncclSuccess) {                                                \
      return absl::InternalError(absl::StrCat(#call, " failed at ", __FILE__, ":", __LINE__, \
                                              ": ", ncclGetErrorString(ds_nccl_result_))); \
    }                                                                                    \
  } while (0)

absl::StatusOr<ncclDataType_t> NcclType(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kInt:
      return ncclInt32;
    case torch::kLong:
      return ncclInt64;
    case torch::kByte:
      return ncclUint8;
    case torch::kChar:
      return ncclInt8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: unsupported dtype ", c10::toString(tensor.scalar_type())));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    default:
      return ncclSum;
  }
}

absl::Status CheckCuda(const torch::Tensor& tensor, const char* op) {
  if (!tensor.is_cuda() || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl ", op, ": needs a contiguous CUDA tensor"));
  }
  return absl::OkStatus();
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return name_; }

  absl::Status AllReduce(torch::Tensor& tensor, ReduceOp op) override {
    if (auto s = CheckCuda(tensor, "all_reduce"); !s.ok()) return s;
    auto type = NcclType(tensor);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), *type,
                                NcclOp(op), comm_, compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const torch::Tensor& input, torch::Tensor& output,
                             ReduceOp op) override {
    if (auto s = CheckCuda(input, "reduce_scatter"); !s.ok()) return s;
    if (auto s = CheckCuda(output, "reduce_scatter"); !s.ok()) return s;
    auto type = NcclType(input);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), *type,
                                    NcclOp(op), comm_, compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    if (auto s = CheckCuda(input, "all_gather"); !s.ok()) return s;
    if (auto s = CheckCuda(output, "all_gather"); !s.ok()) return s;
    auto type = NcclType(input);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), *type, comm_,
                                compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status Broadcast(torch::Tensor& tensor, int root) override {
    if (auto s = CheckCuda(tensor, "broadcast"); !s.ok()) return s;
    auto type = NcclType(tensor);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), *type, root,
                                comm_, compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status Send(const torch::Tensor& tensor, int peer) override {
    if (auto s = CheckCuda(tensor, "send"); !s.ok()) return s;
    auto type = NcclType(tensor);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclSend(tensor.data_ptr(), tensor.numel(), *type, peer, comm_,
                           compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status Recv(torch::Tensor& tensor, int peer) override {
    if (auto s = CheckCuda(tensor, "recv"); !s.ok()) return s;
    auto type = NcclType(tensor);
    if (!type.ok()) return type.status();
    DS_NCCL_CHECK(ncclRecv(tensor.data_ptr(), tensor.numel(), *type, peer, comm_,
                           compat::CurrentCudaStream()));
    return absl::OkStatus();
  }

  absl::Status SendRecv(std::vector<PeerTransfer>& transfers) override {
    for (const PeerTransfer& transfer : transfers) {
      if (auto s = CheckCuda(transfer.tensor, "send_recv"); !s.ok()) return s;
      if (auto type = NcclType(transfer.tensor); !type.ok()) return type.status();
    }
    cudaStream_t stream = compat::CurrentCudaStream();
    DS_NCCL_CHECK(ncclGroupStart());
    for (PeerTransfer& transfer : transfers) {
      const ncclDataType_t type = *NcclType(transfer.tensor);
      if (transfer.kind == PeerTransfer::Kind::kSend) {
        DS_NCCL_CHECK(ncclSend(transfer.tensor.data_ptr(), transfer.tensor.numel(), type, transfer.peer, comm_, stream));
      } else {
        DS_NCCL_CHECK(ncclRecv(transfer.tensor.data_ptr(), transfer.tensor.numel(), type, transfer.peer, comm_, stream));
      }
    }
    DS_NCCL_CHECK(ncclGroupEnd());
    return absl::OkStatus();
  }

  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output) override {
    if (auto s = CheckCuda(input, "all_to_all"); !s.ok()) return s;
    if (auto s = CheckCuda(output, "all_to_all"); !s.ok()) return s;
    auto type = NcclType(input);
    if (!type.ok()) return type.status();
    const int64_t chunk = input.numel() / size_;
    const size_t bytes = static_cast<size_t>(chunk) * input.element_size();
    auto* in = static_cast<char*>(input.data_ptr());
    auto* out = static_cast<char*>(output.data_ptr());
    cudaStream_t stream = compat::CurrentCudaStream();
    DS_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      DS_NCCL_CHECK(ncclSend(in + peer * bytes, chunk, *type, peer, comm_, stream));
      DS_NCCL_CHECK(ncclRecv(out + peer * bytes, chunk, *type, peer, comm_, stream));
    }
    DS_NCCL_CHECK(ncclGroupEnd());
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    // A one-element all-reduce, then wait for it: NCCL has no barrier.
    float* scratch = nullptr;
    if (cudaMalloc(&scratch, sizeof(float)) != cudaSuccess) {
      return absl::ResourceExhaustedError("nccl barrier: cudaMalloc failed");
    }
    cudaStream_t stream = compat::CurrentCudaStream();
    ncclResult_t result = ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm_, stream);
    cudaStreamSynchronize(stream);
    cudaFree(scratch);
    if (result != ncclSuccess) {
      return absl::InternalError(absl::StrCat("nccl barrier: ", ncclGetErrorString(result)));
    }
    return absl::OkStatus();
  }

 private:
  ncclComm_t comm_;
  const int rank_;
  const int size_;
  const std::string name_ = "nccl";
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(StoreClient& store,
                                                                     const GroupSpec& group) {
  auto index = IndexInGroup(group);
  if (!index.ok()) return index.status();
  const int rank = *index;
  const std::string key = absl::StrCat("comm/", group.name, "/nccl_unique_id");
  ncclUniqueId id;
  if (rank == 0) {
    DS_NCCL_CHECK(ncclGetUniqueId(&id));
    absl::Status published =
        store.Set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!published.ok()) return published;
  } else {
    auto value = store.WaitGet(key, std::chrono::minutes(10));
    if (!value.ok()) return value.status();
    if (value->size() != sizeof(id)) {
      return absl::DataLossError(absl::StrCat("nccl unique id of group ", group.name, " has ",
                                              value->size(), " bytes, expected ", sizeof(id)));
    }
    std::memcpy(&id, value->data(), sizeof(id));
  }
  ncclComm_t comm;
  DS_NCCL_CHECK(ncclCommInitRank(&comm, static_cast<int>(group.members.size()), id, rank));
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, rank, static_cast<int>(group.members.size())));
}

#else  // no NCCL in this build

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(StoreClient&,
                                                                     const GroupSpec& group) {
  return absl::UnimplementedError(absl::StrCat(
      "group ", group.name, ": this build has no NCCL (it needs /usr/local/cuda with nccl.h)"));
}

#endif

}  // namespace dslaunch::runtime
