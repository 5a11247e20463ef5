// Note [Paged key/value cache]: the keys and values of every sequence being
// generated live in one pool of fixed-size blocks (vLLM's paged attention
// idea), so sequences of any length share the memory without each reserving
// the model's whole context. A sequence owns a list of blocks (its block
// table); position p of it is slot p % block_size of block table[p /
// block_size]. Per layer the pool is two tensors, keys and values, of
// [blocks, block_size, kv_heads, head_dim] on the model's device.
//
// A step of cached decoding (Note [Key/value cache seam]) is a list of
// pieces: sequence s's tokens at positions [first, first + count), side by
// side in the step's batch. PagedKvCache::Step writes each piece's keys and
// values into its slots and attends each token to its sequence's positions
// up to its own. The one-token pieces (decoding sequences) attend together:
// their keys gathered into one [sequences, heads, longest, head_dim] batch,
// the positions past each sequence's end masked, so a decode step costs one
// attention per layer however many sequences run. A longer piece (a prompt)
// attends on its own. Attention over the gathered keys is plain LibTorch,
// the same arithmetic as the uncached forward; with fused_decode_attention
// (a CUDA device) the decodes' writes and attention are one kernel per layer
// instead (fused_decode_attention.h), reading the pool through the block
// tables in place: no gathered copy, no mask.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/key_value_cache.h"

namespace dslaunch::runtime {

struct PagedKvCacheOptions {
  int64_t layers = 0;
  int64_t kv_heads = 0;  // this rank's
  int64_t head_dim = 0;
  int64_t block_size = 16;  // positions per block
  int64_t blocks = 0;       // in the pool
  // The keys a step attends over are padded (masked) to a multiple of this
  // many positions, so attention sees a few shapes instead of a new one per
  // step (kernel choice and plans, allocator blocks); 1: no padding.
  int64_t key_length_multiple = 1;
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  // Decodes through the CUDA kernel (the engine sets it with the model's
  // fused_kernels); Create refuses it where the kernel cannot run.
  bool fused_decode_attention = false;
};

// Tokens of one sequence in a step: positions [first, first + count).
struct StepPiece {
  int64_t sequence = 0;
  int64_t first = 0;
  int64_t count = 0;
};

class PagedKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const PagedKvCacheOptions& options);

  int64_t BlocksFor(int64_t positions) const { return (positions + options_.block_size - 1) / options_.block_size; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t total_blocks() const { return options_.blocks; }
  int64_t block_size() const { return options_.block_size; }
  // Bytes of the whole pool (keys and values of every layer).
  int64_t bytes() const;
  // Bytes one position takes across layers (keys and values).
  int64_t bytes_per_position() const;

  // Gives `sequence` blocks for `positions` positions in all (a new sequence
  // starts with none). ResourceExhausted, taking nothing, when the pool
  // lacks them.
  absl::Status Reserve(int64_t sequence, int64_t positions);
  // Returns the sequence's blocks to the pool.
  void Release(int64_t sequence);
  // The positions the sequence's blocks hold.
  int64_t Capacity(int64_t sequence) const;

  // The KeyValueCache one cached forward of `pieces` (in the order of the
  // step's tokens) uses. Every piece's positions must be reserved, and its
  // earlier positions written by earlier steps.
  class Step;
  absl::StatusOr<std::unique_ptr<Step>> BeginStep(const std::vector<StepPiece>& pieces);

  // A decode step (every piece one token: a sequence's newest) as host
  // tables: what BeginStep sends to the device, and what a CUDA graph's step
  // copies into its inputs (Note [Decode graphs]).
  struct DecodeTables {
    int64_t longest = 0;           // keys each sequence attends over, padded
    std::vector<int64_t> written;  // [d] the slot of each one's position
    std::vector<int64_t> visible;  // [d · longest] slots (past a sequence's end: slot 0)
    std::vector<int64_t> ends;     // [d] positions each one attends to
  };
  absl::StatusOr<DecodeTables> PlanDecodes(const std::vector<StepPiece>& pieces) const;
  // The step of such tables already on the device (int64: written [d],
  // visible [d, longest], ends [d]). Everything it computes it computes on
  // the device from them, so a CUDA graph can capture its Attend and replay
  // it with new tables in the same tensors.
  std::unique_ptr<Step> DecodeStep(const torch::Tensor& written, const torch::Tensor& visible,
                                   const torch::Tensor& ends);

 private:
  explicit PagedKvCache(const PagedKvCacheOptions& options);
  // Slots of positions [0, end) of `sequence`, then slot 0 up to `padded`.
  torch::Tensor Slots(int64_t sequence, int64_t end, int64_t padded) const;
  absl::Status CheckPiece(const StepPiece& piece) const;
  // The tables of one-token pieces whose pieces were checked.
  DecodeTables DecodeTablesOf(const std::vector<StepPiece>& decodes) const;
  int64_t Padded(int64_t length) const {
    const int64_t m = options_.key_length_multiple;
    return (length + m - 1) / m * m;
  }

  PagedKvCacheOptions options_;
  std::vector<torch::Tensor> keys_, values_;  // per layer: [blocks · block_size, kv_heads, head_dim]
  std::vector<int64_t> free_;                 // block numbers, the next to give at the back
  std::map<int64_t, std::vector<int64_t>> tables_;
};

class PagedKvCache::Step final : public KeyValueCache {
 public:
  torch::Tensor Attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) override;

 private:
  friend class PagedKvCache;
  struct Piece {
    int64_t offset = 0;  // in the step's tokens
    int64_t count = 0;
    torch::Tensor written;  // slots of the piece's positions
    torch::Tensor visible;  // slots of positions [0, first + count), padded
    torch::Tensor allowed;  // [1, 1, count, padded] bool: causal, padding masked
  };
  // The one-token pieces, attended as one batch.
  struct Decodes {
    torch::Tensor offsets;  // [d] in the step's tokens
    torch::Tensor written;  // [d] the slot of each one's position
    torch::Tensor visible;  // [d, longest] slots (past a sequence's end: slot 0, masked)
    torch::Tensor allowed;  // [d, 1, 1, longest] bool (LibTorch's attention)
    torch::Tensor ends;     // [d] positions each attends to (the fused kernel)
    int64_t count = 0;
    int64_t longest = 0;
  };
  // The longer pieces: their keys and values written, their attention into out.
  void AttendPieces(const torch::Tensor& q, const torch::Tensor& step_keys, const torch::Tensor& step_values,
                    torch::Tensor& keys, torch::Tensor& values, torch::Tensor& out);
  Step(PagedKvCache& cache, std::vector<Piece> pieces, Decodes decodes)
      : cache_(cache), pieces_(std::move(pieces)), decodes_(std::move(decodes)) {}
  PagedKvCache& cache_;
  std::vector<Piece> pieces_;  // the longer pieces
  Decodes decodes_;
};

}  // namespace dslaunch::runtime
