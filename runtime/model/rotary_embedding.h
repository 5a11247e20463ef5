// Rotary position embeddings in Hugging Face's convention (Note [RoPE
// convention]): the frequencies of `rope_theta` with the scalings Llama-family
// configs name (`linear`, `dynamic`, `llama3`), and their application to the
// query and key heads.
//
// Note [RoPE convention]
// Hugging Face's Llama rotates the two halves of each head against each other
// (GPT-NeoX's "rotate half"): with d the head width and f_i the i-th of d/2
// frequencies, position p turns the pair (x_i, x_{i+d/2}) by angle p·f_i.
// Meta's original checkpoints pair neighbours (x_{2i}, x_{2i+1}) instead, and
// the conversion to Hugging Face permutes the rows of q_proj and k_proj to
// match. Mixing the two gives fluent-looking gibberish (transformers #25199,
// gpt-fast #190): this file implements the Hugging Face form only, since the
// weights it gets come from Hugging Face folders. cos and sin are computed in
// fp32 and cast to the activations' dtype before use, as Hugging Face does,
// so bf16 runs round the same way.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <torch/torch.h>

namespace dslaunch::runtime {

struct RopeScaling {
  enum class Type { kNone, kLinear, kDynamic, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct RopeOptions {
  int64_t head_dim = 0;
  double theta = 10000.0;
  // The context the model was trained for (`max_position_embeddings`):
  // dynamic scaling stretches the frequencies for longer sequences.
  int64_t max_position_embeddings = 2048;
  RopeScaling scaling;
};

// "linear", "dynamic", "llama3" ("default" and "" are kNone).
std::string RopeScalingName(RopeScaling::Type type);

// inv_freq [head_dim / 2], fp32, for a forward over `time` positions (only
// dynamic scaling depends on it: Hugging Face's dynamic NTK recomputes the
// base when the sequence outgrows max_position_embeddings).
torch::Tensor RotaryInverseFrequencies(const RopeOptions& options, int64_t time);

// cos and sin [time, head_dim] for positions 0..time-1, computed in fp32 and
// returned in `dtype`.
std::pair<torch::Tensor, torch::Tensor> RotaryCosSin(const RopeOptions& options, int64_t time,
                                                     torch::Device device, torch::ScalarType dtype);

// x·cos + rotate_half(x)·sin for x [batch, heads, time, head_dim] and cos,
// sin [time, head_dim]; rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace dslaunch::runtime
