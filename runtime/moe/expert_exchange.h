// Moving token rows between the ranks of an expert-parallel group (Note
// [Mixture of experts]).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "runtime/moe/moe_options.h"

namespace dslaunch::runtime {

// Every rank's row counts per expert, agreed in one all-gather: row p of the
// [P, E] result (int64, on the CPU; gathered on the counts' device) is rank p's
// `counts` ([E] int64). The identity view of `counts` with one member.
torch::Tensor AgreeExpertCounts(const torch::Tensor& counts, const ExpertParallelGroup& group);

// A variable-split all-to-all as an autograd function: `rows` ([N, H]) holds
// send_counts[q] rows for each rank q in order; the result holds
// recv_counts[q] rows from each rank q in order. Backward is the reverse
// exchange. Every rank's counts must agree with its peers' (rank p's
// send_counts[q] == rank q's recv_counts[p]): AgreeExpertCounts gives every
// rank the matrix they come from.
torch::Tensor ExchangeRows(const torch::Tensor& rows, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, const ExpertParallelGroup& group);

// Test builds prove the expert parity tests can fail: the backward exchange
// returns zeros instead of the peers' gradients. Process-wide.
void BreakExpertExchangeBackwardForTesting(bool broken);

}  // namespace dslaunch::runtime
