// Test support: the tiny Llama (2 layers, width 16, 4 heads over 2 key/value
// heads) the Hugging Face folder tests write and read back. Header-only.
#pragma once

#include <cstdint>

#include "runtime/model/llama_hf_config.h"

namespace dslaunch::runtime::testing {

inline LlamaHfConfig HfTestLlamaConfig(int64_t vocab_size, bool tied) {
  LlamaHfConfig config;
  LlamaOptions& o = config.options;
  o.layers = 2;
  o.hidden = 16;
  o.intermediate = 24;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 4;
  o.vocab_size = vocab_size;
  o.tie_word_embeddings = tied;
  o.rope.head_dim = 4;
  return config;
}

}  // namespace dslaunch::runtime::testing
