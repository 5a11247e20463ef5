// decode_linear_bench: the linear layers of one decode step of a
// Llama-2-7B-shaped model (Note [Decode linear]) — per layer the joined
// q/k/v, o, the joined gate/up and down projections, then the output head,
// every layer its own weights so nothing is served from L2 — timed through
// LibTorch's linear (cuBLAS) and through the decode kernel in the same run,
// at a decode step's row counts, in bf16 and with int8 weights. Figures: ms
// per step, the bandwidth at which the step reads its weights, and that
// bandwidth against a device-to-device copy measured in the same run (bytes
// read plus written) and against --hbm_tb_per_s.
//
//   decode_linear_bench [--device cuda] [--rows 1,2,4,8] [--layers 32] [--int8]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flag_table.h"
#include "runtime/model/decode_linear.h"
#include "runtime/model/fused_ops.h"

namespace dslaunch::runtime {
namespace {

struct Options {
  std::string device = "cuda";
  std::string rows = "1,2,4,8";
  int64_t layers = 32, hidden = 4096, intermediate = 11008, vocab = 32000;
  int64_t iterations = 20;
  double hbm_tb_per_s = 4.8;
  bool int8 = false;
};

struct Layer {
  torch::Tensor qkv, o, gate_up, down;  // [out, in]
  torch::Tensor qkv_scale, o_scale, gate_up_scale, down_scale;  // int8 only
};

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

double SecondsPerRun(const torch::Device& device, int64_t iterations, const std::function<void()>& run) {
  for (int i = 0; i < 2; ++i) run();  // warm: the allocator's blocks, cuBLAS's handles
  Synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) run();
  Synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

torch::Tensor Int8Weights(const torch::Tensor& shape_of, torch::Tensor* scale) {
  const int64_t out = shape_of.size(0), in = shape_of.size(1);
  *scale = torch::full({out}, 1.0 / (127.0 * std::sqrt(static_cast<double>(in))), shape_of.options());
  return torch::randint(-127, 128, {out, in}, shape_of.options().dtype(torch::kChar));
}

absl::Status Run(const Options& options) {
  const torch::Device device(options.device);
  if (!device.is_cuda() || !torch::cuda::is_available() || !FusedKernelsBuilt()) {
    return absl::FailedPreconditionError("decode_linear_bench runs on a CUDA device of a build with the kernels");
  }
  std::vector<int64_t> row_counts;
  for (absl::string_view part : absl::StrSplit(options.rows, ',')) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(part, &rows) || rows < 1) {
      return absl::InvalidArgumentError("--rows: '" + std::string(part) + "' is not a positive count");
    }
    row_counts.push_back(rows);
  }
  torch::NoGradGuard no_grad;
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const int64_t h = options.hidden, inner = options.intermediate;
  std::vector<Layer> layers(options.layers);
  for (Layer& layer : layers) {
    layer.qkv = torch::randn({3 * h, h}, bf16) / std::sqrt(h);
    layer.o = torch::randn({h, h}, bf16) / std::sqrt(h);
    layer.gate_up = torch::randn({2 * inner, h}, bf16) / std::sqrt(h);
    layer.down = torch::randn({h, inner}, bf16) / std::sqrt(inner);
  }
  const torch::Tensor head = torch::randn({options.vocab, h}, bf16) / std::sqrt(h);
  int64_t bf16_bytes = head.numel() * 2;
  for (const Layer& layer : layers) {
    bf16_bytes += (layer.qkv.numel() + layer.o.numel() + layer.gate_up.numel() + layer.down.numel()) * 2;
  }

  // The device's copy bandwidth (read + written), the practical ceiling.
  const torch::Tensor from = torch::empty({int64_t{1} << 30}, bf16), to = torch::empty_like(from);
  const double copy_seconds = SecondsPerRun(device, 10, [&] { to.copy_(from); });
  const double copy_gb_per_s = 2.0 * from.numel() * 2 / copy_seconds / 1e9;
  std::printf("decode_linear_bench: %lld layers (hidden %lld, intermediate %lld) + head (vocab %lld): %.2f GB of "
              "bf16 weights per step; device copy %.0f GB/s (read + written); roofline %.2f TB/s\n",
              static_cast<long long>(options.layers), static_cast<long long>(h), static_cast<long long>(inner),
              static_cast<long long>(options.vocab), bf16_bytes / 1e9, copy_gb_per_s, options.hbm_tb_per_s);

  auto report = [&](const char* what, int64_t rows, int64_t bytes, double seconds, double reference_seconds) {
    const double gb_per_s = bytes / seconds / 1e9;
    std::printf("  %-22s rows %lld: %7.3f ms/step  %6.0f GB/s  %5.1f%% of copy  %5.1f%% of roofline  %.2fx cuBLAS\n",
                what, static_cast<long long>(rows), seconds * 1e3, gb_per_s, 100 * gb_per_s / copy_gb_per_s,
                100 * gb_per_s / (options.hbm_tb_per_s * 1e3), reference_seconds / seconds);
  };
  for (int64_t rows : row_counts) {
    const torch::Tensor xh = torch::randn({1, rows, h}, bf16), xi = torch::randn({1, rows, inner}, bf16);
    auto step = [&](bool fused) {
      return [&, fused] {
        for (const Layer& layer : layers) {
          LinearOp(xh, layer.qkv, {}, fused);
          LinearOp(xh, layer.o, {}, fused);
          LinearOp(xh, layer.gate_up, {}, fused);
          LinearOp(xi, layer.down, {}, fused);
        }
        LinearOp(xh, head, {}, fused);
      };
    };
    const double cublas = SecondsPerRun(device, options.iterations, step(false));
    const double kernel = SecondsPerRun(device, options.iterations, step(true));
    if (!UsesDecodeLinearKernel(xh, head, {}, {})) std::printf("  (rows %lld: past the kernel's rows)\n",
                                                               static_cast<long long>(rows));
    report("bf16 cuBLAS", rows, bf16_bytes, cublas, cublas);
    report("bf16 decode kernel", rows, bf16_bytes, kernel, cublas);
  }
  if (!options.int8) return absl::OkStatus();

  // Int8: the same step with int8 weights and a scale per row (half the
  // bytes); LibTorch's path widens each weight to bf16 first.
  for (Layer& layer : layers) {
    layer.qkv = Int8Weights(layer.qkv, &layer.qkv_scale);
    layer.o = Int8Weights(layer.o, &layer.o_scale);
    layer.gate_up = Int8Weights(layer.gate_up, &layer.gate_up_scale);
    layer.down = Int8Weights(layer.down, &layer.down_scale);
  }
  int64_t int8_bytes = head.numel() * 2;
  for (const Layer& layer : layers) {
    int64_t weights = layer.qkv.numel() + layer.o.numel() + layer.gate_up.numel() + layer.down.numel();
    int64_t scales = layer.qkv_scale.numel() + layer.o_scale.numel() + layer.gate_up_scale.numel() +
                     layer.down_scale.numel();
    int8_bytes += weights + 2 * scales;
  }
  std::printf("int8 weights (bf16 head): %.2f GB per step\n", int8_bytes / 1e9);
  for (int64_t rows : row_counts) {
    const torch::Tensor xh = torch::randn({1, rows, h}, bf16), xi = torch::randn({1, rows, inner}, bf16);
    auto step = [&](bool fused) {
      return [&, fused] {
        for (const Layer& layer : layers) {
          Int8LinearOp(xh, layer.qkv, layer.qkv_scale, {}, fused);
          Int8LinearOp(xh, layer.o, layer.o_scale, {}, fused);
          Int8LinearOp(xh, layer.gate_up, layer.gate_up_scale, {}, fused);
          Int8LinearOp(xi, layer.down, layer.down_scale, {}, fused);
        }
        LinearOp(xh, head, {}, fused);
      };
    };
    const double widened = SecondsPerRun(device, options.iterations, step(false));
    const double kernel = SecondsPerRun(device, options.iterations, step(true));
    report("int8 widened (LibTorch)", rows, int8_bytes, widened, widened);
    report("int8 decode kernel", rows, int8_bytes, kernel, widened);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dslaunch::runtime

int main(int argc, char** argv) {
  dslaunch::runtime::Options options;
  dslaunch::FlagTable flags("decode_linear_bench", "decode_linear_bench [flags]");
  flags.String("--device", &options.device, "DEVICE", "cuda or cuda:N")
      .String("--rows", &options.rows, "N,N", "rows of each measured step (a decode step's sequences)")
      .Int("--layers", &options.layers, "N", "decoder layers", {1, 1024})
      .Int("--hidden", &options.hidden, "N", "hidden size", {8, 1 << 16})
      .Int("--intermediate", &options.intermediate, "N", "MLP width", {8, 1 << 18})
      .Int("--vocab", &options.vocab, "N", "output head rows", {1, 1 << 22})
      .Int("--iterations", &options.iterations, "N", "timed steps", {1, 100000})
      .Double("--hbm_tb_per_s", &options.hbm_tb_per_s, "TB/S", "memory bandwidth of the roofline", {0, 100, true})
      .Bool("--int8", &options.int8, "also the step with int8 weights");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "decode_linear_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (absl::Status status = dslaunch::runtime::Run(options); !status.ok()) {
    std::fprintf(stderr, "decode_linear_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
