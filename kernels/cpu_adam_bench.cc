// cpu_adam_bench [elements=50000000] [steps=5]
//
// Steps one buffer with every CPU Adam path this CPU supports and with
// LibTorch's torch::optim::AdamW on the same sizes, in one run, and prints
// elements/s, GB/s at 28 bytes per element (read p, g, m, v; write p, m, v;
// 30 with the bf16 copy) and the speed-up over LibTorch; then the host's copy
// bandwidth measured here (a memcpy split over the same number of threads,
// read plus written bytes) and the best path's share of it, issue 19's
// yardstick. Built, never run by the tests.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu_adam.h"
#include "kernels/range_thread_pool.h"

namespace dslaunch::kernels {
namespace {

// Seconds per step: one untimed warm-up step (first touch, caches), then the
// mean of `steps` timed ones.
double SecondsPerStep(int steps, const std::function<void(int64_t step)>& step_fn) {
  step_fn(1);
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step_fn(2 + s);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / steps;
}

void PrintRow(const std::string& name, int64_t n, double seconds, double bytes_per_element,
              double torch_seconds) {
  std::printf("%-22s %10.1f %9.2f %10.2fx\n", name.c_str(), n / seconds / 1e6,
              n * bytes_per_element / seconds / 1e9, torch_seconds / seconds);
}

int Run(int64_t n, int steps) {
  const AdamParams adam{.lr = 1e-3f, .weight_decay = 1e-2f, .adamw = true};

  // LibTorch first, on as many intra-op threads as ours: its time is the
  // denominator of every ratio. (Its own default can be fewer.)
  const int torch_default_threads = torch::get_num_threads();
  torch::set_num_threads(CpuAdamThreads());
  double torch_seconds = 0.0;
  {
    torch::Tensor param = torch::randn({n});
    param.mutable_grad() = torch::randn({n}) * 1e-2;
    torch::optim::AdamW optimizer(
        {param}, torch::optim::AdamWOptions(adam.lr).weight_decay(adam.weight_decay));
    torch_seconds = SecondsPerStep(steps, [&](int64_t) { optimizer.step(); });
  }

  std::vector<float> params(n), grads(n), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
  std::vector<uint16_t> bf16(n);
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;  // cheap deterministic fill
    params[i] = static_cast<float>(state >> 8) / (1 << 24) - 0.5f;
    grads[i] = 1e-2f * (static_cast<float>(state & 0xFFFF) / (1 << 16) - 0.5f);
  }

  std::printf("CPU Adam step, %lld elements, %d timed steps (+1 warm-up) each, AdamW\n",
              static_cast<long long>(n), steps);
  std::printf("threads: dslaunch %d (chosen ISA %s), LibTorch intra-op %d (its default: %d)\n",
              CpuAdamThreads(), CpuAdamIsa(), torch::get_num_threads(), torch_default_threads);
  std::printf("%-22s %10s %9s %11s\n", "path", "Melem/s", "GB/s", "vs LibTorch");
  PrintRow("libtorch AdamW", n, torch_seconds, 28, torch_seconds);
  double best_gbps = 0;
  for (CpuAdamIsaKind isa : SupportedCpuAdamIsas(DetectCpuIsaSupport())) {
    for (bool with_bf16 : {false, true}) {
      const double seconds = SecondsPerStep(steps, [&](int64_t step) {
        AdamParams a = adam;
        a.step = step;
        CpuAdamStepWithIsa(isa, a, params.data(), grads.data(), exp_avg.data(),
                           exp_avg_sq.data(), n, with_bf16 ? bf16.data() : nullptr);
      });
      PrintRow(std::string(CpuAdamIsaName(isa)) + (with_bf16 ? " +bf16 copy" : ""), n, seconds,
               with_bf16 ? 30 : 28, torch_seconds);
      if (!with_bf16) best_gbps = std::max(best_gbps, n * 28.0 / seconds / 1e9);
    }
  }
  // The yardstick: as many bytes as an Adam step moves (3.5n floats read,
  // 3.5n written), copied by the same number of threads.
  const int64_t words = n * 7 / 2;
  std::vector<float> from(words, 1.0f), to(words, 0.0f);
  RangeThreadPool pool(CpuAdamThreads());
  const double copy_seconds = SecondsPerStep(steps, [&](int64_t) {
    pool.ParallelFor(words, kCpuAdamMinPieceElements, 16, [&](int64_t begin, int64_t end) {
      std::memcpy(to.data() + begin, from.data() + begin, (end - begin) * sizeof(float));
    });
  });
  const double copy_gbps = words * 8.0 / copy_seconds / 1e9;
  std::printf("host copy bandwidth (memcpy on %d threads, read + written bytes): %.2f GB/s\n", pool.num_threads(),
              copy_gbps);
  std::printf("CPU Adam (fastest path) at %.0f%% of the copy bandwidth\n", 100.0 * best_gbps / copy_gbps);
  return 0;
}

}  // namespace
}  // namespace dslaunch::kernels

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 50'000'000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n <= 0 || steps <= 0) {
    std::fprintf(stderr, "usage: %s [elements > 0] [steps > 0]\n", argv[0]);
    return 2;
  }
  if (const absl::Status status = dslaunch::kernels::CpuAdamInit(); !status.ok()) {
    std::fprintf(stderr, "cpu_adam_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return dslaunch::kernels::Run(n, steps);
}
