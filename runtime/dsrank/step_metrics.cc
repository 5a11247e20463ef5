#include "runtime/dsrank/step_metrics.h"

#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

RankMetrics StepMetrics(int64_t total_steps, double loss, double learning_rate, double step_seconds,
                        double tokens_per_step, int64_t samples_per_step, const torch::Device& device) {
  RankMetrics metrics;
  metrics.set_total_steps(total_steps);
  metrics.set_loss(loss);
  metrics.set_learning_rate(learning_rate);
  if (step_seconds > 0) {
    metrics.set_tokens_per_second(tokens_per_step / step_seconds);
    metrics.set_samples_per_second(samples_per_step / step_seconds);
  }
  if (device.is_cuda()) {
    metrics.set_gpu_memory_bytes(static_cast<double>(compat::CudaPeakAllocatedBytes(device.index())));
  }
  return metrics;
}

}  // namespace dslaunch::runtime
