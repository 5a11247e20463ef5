// Note [Key/value cache seam]: how a decoder's attention takes part in
// cached decoding (runtime/inference/) without the model knowing how the
// cache is laid out. A cached forward runs the tokens of one step, several
// sequences' tokens side by side in a batch of one, each at its own
// position; every attention layer computes this step's queries, keys and
// values as always, then hands them to the cache, which keeps the keys and
// values and attends each token to its own sequence's earlier tokens.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace dslaunch::runtime {

class KeyValueCache {
 public:
  virtual ~KeyValueCache() = default;

  // Decoder layer `layer`'s attention for this step's tokens: q [1, heads,
  // tokens, head_dim]; k, v [1, kv_heads, tokens, head_dim] (rotated, before
  // any repetition for grouped-query attention). Keeps k and v; returns the
  // attention output [1, heads, tokens, head_dim].
  virtual torch::Tensor Attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) = 0;
};

}  // namespace dslaunch::runtime
