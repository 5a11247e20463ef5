// What a mixture-of-experts layer is told (Note [Mixture of experts]).
//
// Note [Mixture of experts]
// DeepSpeed's MoE layer (REFERENCE.md, "Mixture of experts"): a router (a
// linear gate from the hidden size to E experts, computed in fp32) picks k
// experts per token; each token's output is the gate-weighted sum of its
// experts' outputs (a dropped token's is zero, so the block's residual
// carries it). Routing (top_k_gating.h) follows DeepSpeed's definitions:
// capacity ceil(k·T/E·capacity_factor), at least min_capacity; top-1 and
// top-2 auxiliary losses E·Σ(me·ce) (me: mean gate probability of an expert,
// ce: the fraction of tokens whose first choice it is), top-k (k > 2)
// (E/k)·Σ(me·ce) with ce over every choice; top-2's second expert drawn with
// Gumbel noise in training; drops by position, or at random with use_rts
// (top-1).
//
// Dispatch never builds a dense [E, capacity, hidden] tensor: the kept
// (token, choice) pairs are sorted by expert, their rows gathered into one
// [N, hidden] tensor, and each local expert runs one matrix product over its
// contiguous rows (moe_layer.h). With expert parallelism (ExpertParallelGroup)
// rank p of the expert group holds experts [p·E/P, (p+1)·E/P); the rows go to
// their expert's rank and come back by a variable-split all-to-all
// (expert_exchange.h). Every layer first all-gathers the per-expert row
// counts over the group, so each rank sizes every buffer from the same
// matrix, dropless or not: no rank waits for a transfer that another rank
// did not size (the hang of DeepSpeed #6809 and #5794).
//
// Gradients: the exchange is an autograd function whose backward is the
// reverse exchange, so each dense parameter's gradient on a rank is that of
// the unsplit layer for this rank's tokens, and an expert's gradient on its
// rank is the sum over the tokens of every rank in the expert group. The
// engine therefore sums expert gradients over the expert-data-parallel group
// and divides by the whole data-parallel size, as it does dense ones (never
// by the expert-data size: that is DeepSpeed #5618's factor of ep).
//
// The auxiliary (and router z-) loss enters the gradient through
// auxiliary_loss.h: each layer attaches its loss to its output, and backward
// gives it the gradient scale the training loss received, so activation
// checkpointing (which recomputes the layer) and loss scaling need nothing
// else. The value is added to the reported training loss.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/comm/communicator.h"

namespace dslaunch::runtime {

// DeepSpeed's noisy_gate_policy: Jitter multiplies the router's input by
// U(1-ε, 1+ε), ε = 0.01; RSample adds Gumbel noise to the logits that pick
// the (first) expert. Both in training only.
enum class NoisyGatePolicy { kNone, kJitter, kRSample };

// "None", "Jitter", "RSample" (DeepSpeed's spelling; also null).
const char* NoisyGatePolicyName(NoisyGatePolicy policy);
bool ParseNoisyGatePolicy(const std::string& text, NoisyGatePolicy* policy);

// This rank's expert-parallel group: the ranks its experts are split over.
struct ExpertParallelGroup {
  Communicator* comm = nullptr;  // null: one member
  int rank = 0;
  int size = 1;

  bool split() const { return size > 1; }
};

struct GatingOptions {
  int64_t num_experts = 0;
  int64_t top_k = 1;
  double capacity_factor = 1.0;       // training
  double eval_capacity_factor = 1.0;  // evaluation
  int64_t min_capacity = 4;
  bool drop_tokens = true;  // false: dropless (every token reaches its experts)
  bool use_rts = true;      // top-1 drops at random (else by position)
  // Top-2 in training: the second expert by Gumbel-noised logits (DeepSpeed's
  // top2_2nd_expert_sampling); else the second best, as in evaluation.
  bool second_expert_sampling = true;
  NoisyGatePolicy noisy_gate_policy = NoisyGatePolicy::kNone;
};

struct MoeOptions {
  GatingOptions gating;
  // Every `every`-th block is a mixture of experts: block i (from 0) when
  // (i + 1) % every == 0 (every 2: blocks 1, 3, 5, ... as DeepSpeed's and
  // GShard's examples place them); 1: all.
  int64_t every = 1;
  double aux_loss_coef = 0.01;  // the load-balancing loss's weight in the loss
  double z_loss_coef = 0;       // ST-MoE's router z-loss, mean(logsumexp(logits)²)
  // Residual MoE (DeepSpeed use_residual): a dense expert beside the mixture,
  // the two mixed by a learned per-token softmax coefficient.
  bool use_residual = false;
  // Note [Expert row buckets]: each expert's rows are padded with zero rows
  // up to a multiple of this before its matrix products, and the padding's
  // outputs dropped. Without it a dropless (or under-capacity) expert sees a
  // new row count nearly every step, and each new matrix shape costs the
  // host a cuBLAS heuristic query and the caching allocator new blocks: on
  // an H200, 8 dropless experts x 12 layers kept the GPU idle 70% of a
  // 248 ms step while its kernels took 71 ms (scripts/gpu-moe-profile.sh).
  // The padding rows change no result: their outputs are cut off and their
  // gradients are zero. 1: no padding.
  int64_t expert_row_multiple = 128;
  ExpertParallelGroup expert_parallel;

  bool enabled() const { return gating.num_experts > 0; }
  bool IsExpertBlock(int64_t block) const { return enabled() && (block + 1) % every == 0; }
};

// Empty when the options can build a layer; otherwise what is wrong, naming
// the key under model.moe (num_experts, top_k, every, ...) and the expert-
// parallel size.
std::string CheckMoeOptions(const MoeOptions& options);

}  // namespace dslaunch::runtime
