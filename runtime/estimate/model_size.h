// How many parameters a job's model has, and the shape its activations take,
// without building it (plain C++: `dslaunch estimate` links no LibTorch).
//
// Note [Model size]
// GPT (runtime/model/gpt.h): token and position embeddings, the output head
// tied to the token embedding, per block two LayerNorms, qkv and output
// projections and the 4x MLP, all with biases: V·d + T·d + L·(12d² + 13d) +
// 2d, with V padded to a multiple of tp_size × make_vocab_size_divisible_by.
// The byte tokenizer's vocabulary is 257; a sentencepiece one is
// data.tokenizer_vocab_size (8000 when 0).
// Llama family (model.from's config.json, the keys runtime/model/
// llama_hf_config.h reads, with transformers' defaults): embedding V·h, per
// layer q and o (h × heads·head_dim), k and v (h × kv_heads·head_dim), the
// SwiGLU MLP (3·h·intermediate, times num_local_experts plus the router
// h·experts for Mixtral), two RMSNorms; the final norm; the head V·h unless
// tie_word_embeddings. Biases where attention_bias / mlp_bias say so, and on
// q, k and v for qwen2. LoRA (lora.r > 0) freezes all of it and trains
// r·(in + out) per adapted projection.
// largest_layer is DeepSpeed's largest_layer_params: the most parameters one
// module holds itself (for these models, an embedding, the head or an MLP
// projection's weight and bias).
// model_tests checks these counts against the built models' ParameterCount.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"

namespace dslaunch::runtime {

struct ModelSize {
  std::string description;  // "gpt: 24 layers, width 2048, 16 heads, vocabulary 50304, sequence 1024"
  int64_t trainable = 0;     // Ψ: what the optimizer steps
  int64_t frozen = 0;        // LoRA's base, held in the compute dtype and never stepped
  int64_t largest_layer = 0;
  int64_t block = 0;  // one transformer block's parameters (stage 3 gathers a block at a time)
  // For the activation estimate.
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 0, sequence_length = 0;
};

struct GptShape {
  int64_t layers = 0, width = 0, vocab = 0, sequence_length = 0;
};
int64_t GptParameters(const GptShape& shape);

struct LlamaShape {
  int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int64_t experts = 0;  // 0: dense
  bool tied = false, attention_bias = false, mlp_bias = false, qkv_bias = false;
  int64_t max_position_embeddings = 2048;
};
int64_t LlamaParameters(const LlamaShape& shape);
// The LoRA parameters `lora` adds to `shape` (Note [Model size]); an error
// names a target that matches no projection.
absl::StatusOr<int64_t> LlamaLoraParameters(const LlamaShape& shape, const LoraConfig& lora);

// `text` is a config.json; `path` names it in errors.
absl::StatusOr<LlamaShape> ParseLlamaShape(const std::string& text, const std::string& path);

// The model of a loaded job file (model.from's config.json is read from disk).
absl::StatusOr<ModelSize> ModelSizeOf(const JobConfig& job);

// The job's model as its family lists its layers (ModelInterface::Layers:
// the embedding, each block, the head), each with the elements of the
// parameters it owns on tensor-parallel rank 0 (a tied embedding counted by
// the embedding; frozen parameters and LoRA's adapters included): what a
// pipeline's partition_method weighs (Note [Pipeline stages]), so that
// --dry_run shows the partition every rank will cut. model_tests checks the
// counts against the built models' Layers().
struct LayerSize {
  std::string name;  // "embedding", "blocks.3" / "layers.3", "head"
  std::string type;  // "Embedding", "GptBlock" / "LlamaDecoderLayer", "Head"
  int64_t parameters = 0;
  int64_t trainable = 0;  // of them: all, or with LoRA the adapters only
};
absl::StatusOr<std::vector<LayerSize>> LayerSizesOf(const JobConfig& job);

}  // namespace dslaunch::runtime
