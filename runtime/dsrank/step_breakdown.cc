#include "runtime/dsrank/step_breakdown.h"

#include "absl/strings/str_format.h"
#include "runtime/pipeline/pipeline_schedule.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

void PrintWallClockBreakdown(std::FILE* out, const WallClockWindow& window, const Engine& engine, bool delay_update,
                             const PipelineEngine* pipe, const std::vector<std::array<double, 4>>& stage_seconds) {
  absl::FPrintF(out,
                "  wall clock over %d step(s): forward+backward %.3f s, all-reduce+optimizer %.3f s, "
                "preemption check and next batch (while the GPU works) %.3f s, the rest %.3f s\n",
                window.steps, window.forward_backward, window.step, window.overlapped,
                window.seconds - window.forward_backward - window.step - window.overlapped);
  // Note [Offload breakdown]: since the start, this rank's share.
  const Engine::OffloadSeconds& offload = engine.offload_seconds();
  if (offload.host_step > 0) {
    absl::FPrintF(out,
                  "  offload since the start: gradients to the host %.3f s, norm and clip %.3f s, host step "
                  "%.3f s (%.2f GB/s of optimizer traffic), parameters to the device (not hidden behind the "
                  "host step) %.3f s\n",
                  offload.gradients_to_host, offload.norm_and_clip, offload.host_step,
                  offload.host_step_bytes / offload.host_step / 1e9, offload.parameters_to_device);
    // Note [Delayed parameter update]: the host step beside the next
    // forward and backward; what of it the training thread waited for.
    if (delay_update) {
      absl::FPrintF(out, "  delayed update: waited for the host step %.3f s of its %.3f s\n", offload.host_step_wait,
                    offload.host_step);
    }
  }
  if (pipe == nullptr) return;
  // Note [Measured bubble]: against the pipeline's step.
  std::vector<double> busy, schedule_window;
  for (const auto& t : stage_seconds) {
    busy.push_back(t[0] + t[1]);
    schedule_window.push_back(t[3]);
  }
  const std::vector<double> bubbles = StageBubbleFractions(busy, schedule_window);
  for (size_t stage = 0; stage < stage_seconds.size(); ++stage) {
    const auto& t = stage_seconds[stage];
    absl::FPrintF(out,
                  "  pipeline stage %d: forward %.3f s, backward %.3f s, transfers %.3f s, bubble %.1f%% "
                  "(schedule's theory %.1f%%)\n",
                  stage, t[0], t[1], t[2], 100.0 * bubbles[stage],
                  100.0 * TheoreticalBubbleFraction(pipe->schedule(), pipe->shape()));
  }
}

void PrintMemoryBreakdown(std::FILE* out, const Engine& engine, const torch::Device& device, int zero_stage) {
  const Engine::MemoryBreakdown m = engine.Memory();
  absl::FPrintF(out,
                "  memory: parameters %d B%s, gradients %d B, master weights %d B%s, optimizer state %d B%s, "
                "frozen parameters %d B%s\n",
                m.parameters, m.parameters_on_host ? " (host)" : "", m.gradients, m.master_weights,
                m.optimizer_on_host ? " (host)" : "", m.optimizer_state, m.optimizer_on_host ? " (host)" : "",
                m.frozen_parameters, m.frozen_parameters > 0 && m.parameters_on_host ? " (host)" : "");
  if (m.swapped_to_nvme == 0 && m.host_parameter_copy > 0) {
    absl::FPrintF(out, "  host copy of the bf16 parameters the CPU Adam writes: %d B\n", m.host_parameter_copy);
  }
  if (m.swapped_to_nvme > 0) {
    absl::FPrintF(out,
                  "  NVMe offload: master weights and optimizer state %d B in swap files, host buffers %d B, "
                  "updated parameters on the host %d B\n",
                  m.swapped_to_nvme, m.swap_buffers, m.host_parameter_copy);
  }
  if (m.parameters_on_nvme > 0 || m.parameters_in_host_memory > 0) {
    absl::FPrintF(out,
                  "  NVMe offload: parameter shards %d B in swap files, %d B in host memory (max_in_cpu), "
                  "staging buffers %d B\n",
                  m.parameters_on_nvme, m.parameters_in_host_memory, m.parameter_staging);
  }
  if (device.is_cuda()) {
    absl::FPrintF(out, "  peak GPU memory allocated: %.2f GiB\n",
                  compat::CudaPeakAllocatedBytes(device.index()) / double(1 << 30));
  }
  if (zero_stage == 3) {
    absl::FPrintF(out, "  ZeRO-3: at most %d parameter elements gathered at once\n", m.gathered_peak_elements);
  }
}

}  // namespace dslaunch::runtime
