// The small Llama of the generation and serving tests (runtime/generate/,
// runtime/serve/): two layers of width heads x head_dim, large weights
// (initializer_range 0.4) so that a rounding difference cannot flip a greedy
// choice between two near-equal tokens. Header-only.
#pragma once

#include <cstdint>

#include "runtime/model/llama.h"

namespace dslaunch::runtime::testing {

// heads x head_dim wide; tensor-parallel tests take 8 heads of 4 and a
// vocabulary the ranks' slices must pad (37).
inline LlamaOptions GenerationTestLlama(int64_t heads = 4, int64_t kv_heads = 2, int64_t head_dim = 8,
                                        int64_t vocab_size = 64) {
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 32;
  options.intermediate = 48;
  options.heads = heads;
  options.kv_heads = kv_heads;
  options.head_dim = head_dim;
  options.vocab_size = vocab_size;
  options.initializer_range = 0.4;
  options.rope.max_position_embeddings = 128;
  return options;
}

}  // namespace dslaunch::runtime::testing
