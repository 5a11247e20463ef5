// A Hugging Face `config.json` of the Llama family, read strictly into
// LlamaOptions, and written back (Note [Llama configs]).
//
// Note [Llama configs]
// Accepted: model_type "llama", "mistral", "qwen2" or "mixtral" (the others
// are a different architecture). Mixtral's num_local_experts,
// num_experts_per_tok (2) and router_aux_loss_coef (0.001, in the loss only
// with output_router_logits, as in transformers) make every layer a dropless
// mixture of experts (options.moe); router_jitter_noise must be 0. The
// load-balancing loss is DeepSpeed's per-layer top-2 form, not transformers'
// form over all layers' logits at once. The keys that shape the math are read with
// transformers' defaults: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (= heads), head_dim (= hidden /
// heads), vocab_size, rms_norm_eps (1e-6), rope_theta (10000),
// rope_scaling / rope_parameters (types default, linear, dynamic, llama3),
// max_position_embeddings (2048), tie_word_embeddings (false),
// attention_bias / mlp_bias (false; Qwen2 has q/k/v biases by design),
// hidden_act ("silu" only), attention_dropout (0 only), sliding_window
// (Mistral; kept, and a sequence longer than it is refused) and
// use_sliding_window (Qwen2; false only). Keys that describe the file and not
// the math (architectures, torch_dtype, token ids, ...) are known and kept.
// Any other key is refused by name: a key this runtime does not understand
// may change the model, and a model that silently computes something else is
// the worst outcome (quantization_config, a new rope type, ...).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct LlamaHfConfig {
  LlamaOptions options;
  std::string model_type = "llama";
  std::string torch_dtype;                   // as written ("bfloat16", ...); empty when absent
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> sliding_window;  // Mistral, Mixtral
  // Mixtral: written back as read. As in transformers, the load-balancing
  // loss (options.moe.aux_loss_coef) is router_aux_loss_coef only with
  // output_router_logits, else 0.
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  // The descriptive keys (architectures, bos_token_id, ...) as JSON text,
  // written back unchanged on export.
  std::map<std::string, std::string> descriptive;
};

// `text` is the file's contents; `path` names it in errors
// ("/m/config.json: num_key_value_heads: 3 does not divide num_attention_heads 8").
absl::StatusOr<LlamaHfConfig> ParseLlamaHfConfig(const std::string& text, const std::string& path);

// config.json for `config` with its weights stored as `torch_dtype`
// ("float32", "float16", "bfloat16"): every key ParseLlamaHfConfig reads, so
// that parsing the result gives the same options.
std::string LlamaHfConfigJson(const LlamaHfConfig& config, const std::string& torch_dtype);

}  // namespace dslaunch::runtime
