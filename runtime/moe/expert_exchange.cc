#include "runtime/moe/expert_exchange.h"

#include <atomic>
#include <numeric>

namespace dslaunch::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<bool> backward_broken{false};

void Check(const absl::Status& status, const char* what) {
  TORCH_CHECK(status.ok(), "expert-parallel ", what, ": ", status.ToString());
}

torch::Tensor Exchange(const torch::Tensor& rows, const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& recv_counts, Communicator* comm) {
  const int me = comm->rank();
  const int64_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  torch::Tensor input = rows.contiguous();
  torch::Tensor output = torch::empty({received, input.size(1)}, input.options());
  std::vector<PeerTransfer> transfers;
  int64_t send_offset = 0, recv_offset = 0;
  for (int peer = 0; peer < comm->size(); ++peer) {
    torch::Tensor out = output.narrow(0, recv_offset, recv_counts[peer]);
    torch::Tensor in = input.narrow(0, send_offset, send_counts[peer]);
    if (peer == me) {
      TORCH_CHECK(send_counts[peer] == recv_counts[peer], "expert exchange: ", send_counts[peer], " rows to self but ",
                  recv_counts[peer], " expected");
      out.copy_(in);
    } else {
      // A count of zero is known to both sides (the agreed matrix): no
      // transfer.
      if (send_counts[peer] > 0) transfers.push_back(PeerTransfer{PeerTransfer::Kind::kSend, in, peer});
      if (recv_counts[peer] > 0) transfers.push_back(PeerTransfer{PeerTransfer::Kind::kRecv, out, peer});
    }
    send_offset += send_counts[peer];
    recv_offset += recv_counts[peer];
  }
  TORCH_CHECK(send_offset == input.size(0), "expert exchange: send counts sum to ", send_offset, ", rows are ",
              input.size(0));
  if (!transfers.empty()) Check(comm->SendRecv(transfers), "exchange");
  return output;
}

struct ExchangeFunction : torch::autograd::Function<ExchangeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, std::vector<int64_t> send_counts,
                               std::vector<int64_t> recv_counts, int64_t comm) {
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["recv"] = recv_counts;
    ctx->saved_data["comm"] = comm;
    return Exchange(rows, send_counts, recv_counts, reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    std::vector<int64_t> send_counts = ctx->saved_data["send"].toIntVector();
    std::vector<int64_t> recv_counts = ctx->saved_data["recv"].toIntVector();
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    // The gradient of what arrived goes back to where it came from.
    torch::Tensor grad = Exchange(grads[0], recv_counts, send_counts, comm);
    if (backward_broken.load()) grad.zero_();
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor AgreeExpertCounts(const torch::Tensor& counts, const ExpertParallelGroup& group) {
  // On the counts' device: NCCL gathers device tensors only.
  torch::Tensor mine = counts.to(torch::kLong).contiguous();
  if (!group.split()) return mine.to(torch::kCPU).view({1, -1});
  torch::Tensor all = torch::empty({group.size * mine.numel()}, mine.options());
  Check(group.comm->AllGather(mine, all), "row counts");
  return all.to(torch::kCPU).view({group.size, -1});
}

torch::Tensor ExchangeRows(const torch::Tensor& rows, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, const ExpertParallelGroup& group) {
  TORCH_CHECK(static_cast<int>(send_counts.size()) == group.size && static_cast<int>(recv_counts.size()) == group.size,
              "expert exchange: one count per rank of the group (", group.size, ")");
  if (!group.split()) return rows;
  return ExchangeFunction::apply(rows, send_counts, recv_counts, reinterpret_cast<int64_t>(group.comm));
}

void BreakExpertExchangeBackwardForTesting(bool broken) { backward_broken.store(broken); }

}  // namespace dslaunch::runtime
