#include "runtime/model/rotary_embedding.h"

#include <cmath>

namespace dslaunch::runtime {

std::string RopeScalingName(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone: return "default";
    case RopeScaling::Type::kLinear: return "linear";
    case RopeScaling::Type::kDynamic: return "dynamic";
    case RopeScaling::Type::kLlama3: return "llama3";
  }
  return "default";
}

namespace {

// 1 / base^(2i/d) for i < d/2, in fp32 as Hugging Face computes it
// (arange(0, d, 2) as int64, then to float).
torch::Tensor BaseFrequencies(double base, int64_t head_dim) {
  torch::Tensor exponents = torch::arange(0, head_dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(head_dim);
  return 1.0 / torch::pow(torch::tensor(base, torch::kFloat), exponents);
}

}  // namespace

torch::Tensor RotaryInverseFrequencies(const RopeOptions& options, int64_t time) {
  const RopeScaling& scaling = options.scaling;
  const int64_t d = options.head_dim;
  switch (scaling.type) {
    case RopeScaling::Type::kNone:
      return BaseFrequencies(options.theta, d);
    case RopeScaling::Type::kLinear:
      // Positions divided by the factor: the same as frequencies divided by it.
      return BaseFrequencies(options.theta, d) / scaling.factor;
    case RopeScaling::Type::kDynamic: {
      // NTK-aware: beyond the trained context the base grows so that the
      // lowest frequency still spans the whole sequence.
      const double max = static_cast<double>(options.max_position_embeddings);
      const double length = std::max(static_cast<double>(time), max);
      const double base = options.theta * std::pow(scaling.factor * length / max - (scaling.factor - 1.0),
                                                   static_cast<double>(d) / static_cast<double>(d - 2));
      return BaseFrequencies(base, d);
    }
    case RopeScaling::Type::kLlama3: {
      // Llama 3.1: wavelengths longer than the original context / low_freq_factor
      // are divided by the factor, shorter than context / high_freq_factor
      // kept, and those between interpolated.
      torch::Tensor inv_freq = BaseFrequencies(options.theta, d);
      const double context = static_cast<double>(scaling.original_max_position_embeddings);
      const double low_freq_wavelen = context / scaling.low_freq_factor;
      const double high_freq_wavelen = context / scaling.high_freq_factor;
      torch::Tensor wavelen = 2.0 * M_PI / inv_freq;
      torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq);
      torch::Tensor smooth = (context / wavelen - scaling.low_freq_factor) /
                             (scaling.high_freq_factor - scaling.low_freq_factor);
      torch::Tensor smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
      torch::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
      return torch::where(medium, smoothed, scaled);
    }
  }
  return BaseFrequencies(options.theta, d);
}

std::pair<torch::Tensor, torch::Tensor> RotaryCosSin(const RopeOptions& options, int64_t time,
                                                     torch::Device device, torch::ScalarType dtype) {
  torch::Tensor inv_freq = RotaryInverseFrequencies(options, time).to(device);
  torch::Tensor positions = torch::arange(time, torch::TensorOptions().dtype(torch::kFloat).device(device));
  torch::Tensor angles = torch::outer(positions, inv_freq);
  torch::Tensor both = torch::cat({angles, angles}, -1);
  return {both.cos().to(dtype), both.sin().to(dtype)};
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace dslaunch::runtime
