// The ds_config's monitors (tensorboard, csv_monitor), written by rank 0.
//
// Note [Monitor metrics]
// After every optimizer step rank 0 writes these scalars, at x = the samples
// trained so far (DeepSpeed's global_samples), under DeepSpeed's names where
// DeepSpeed logs the same quantity:
//   Train/Samples/train_loss            the step's loss (mean over micro-batches and ranks)
//   Train/Samples/lr                    the learning rate the step used
//   Train/Samples/loss_scale            fp16 only
//   Train/Samples/grad_norm             the global gradient norm before clipping
//   Train/Samples/skipped_steps         steps skipped so far (fp16 overflow, non-finite)
//   Train/Samples/samples_per_second    from the step's wall clock
//   Train/Samples/tokens_per_second
//   Train/Samples/elapsed_time_ms_step  the optimizer step (with wall_clock_breakdown)
//   Train/Samples/tflops_per_gpu        on a GPU: model FLOPs per second per GPU (Note [Model FLOPs])
//   Train/Samples/mfu                   on a GPU whose peak is known, bf16/fp16: that over the peak
//   Memory/peak_gpu_allocated_gib       on a GPU: the peak since the start
//   Memory/host_peak_rss_gib            the rank's peak resident host memory
//   MoE/<layer>/dropped_fraction        with model.moe.telemetry, each expert layer's routing
//   MoE/<layer>/aux_loss                of the step's last micro-batch (dsrank's moe_telemetry.h):
//   MoE/<layer>/tokens_expert_<e>       over the ranks, as the step line prints it
// and at every train.eval_interval:
//   Eval/Samples/eval_loss              the held-out loss (mean over ranks)
// The folder is DeepSpeed's: <output_path>/<job_name> (job_name alone when
// output_path is empty). A relative one is relative to the job file's folder,
// as every other path in the job file (DeepSpeed: the working folder, which
// under a launcher differs from host to host).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/fs/file_system.h"
#include "runtime/monitor/csv_monitor.h"
#include "runtime/monitor/monitor_event.h"
#include "runtime/monitor/tensorboard_event_file.h"

namespace dslaunch::runtime {

namespace monitor_metric {
inline constexpr char kTrainLoss[] = "Train/Samples/train_loss";
inline constexpr char kLearningRate[] = "Train/Samples/lr";
inline constexpr char kLossScale[] = "Train/Samples/loss_scale";
inline constexpr char kGradNorm[] = "Train/Samples/grad_norm";
inline constexpr char kSkippedSteps[] = "Train/Samples/skipped_steps";
inline constexpr char kSamplesPerSecond[] = "Train/Samples/samples_per_second";
inline constexpr char kTokensPerSecond[] = "Train/Samples/tokens_per_second";
inline constexpr char kStepMilliseconds[] = "Train/Samples/elapsed_time_ms_step";
inline constexpr char kTflopsPerGpu[] = "Train/Samples/tflops_per_gpu";
inline constexpr char kMfu[] = "Train/Samples/mfu";
inline constexpr char kPeakGpuGib[] = "Memory/peak_gpu_allocated_gib";
inline constexpr char kHostPeakRssGib[] = "Memory/host_peak_rss_gib";
inline constexpr char kEvalLoss[] = "Eval/Samples/eval_loss";
}  // namespace monitor_metric

// <output_path>/<job_name>, as Python's os.path.join would put them.
std::string MonitorFolder(const MonitorConfig& monitor);

struct MonitorStart {
  int64_t resume_after = 0;  // the x of the last step already trained (0 for a fresh start)
  std::string relative_to;   // the folder relative monitor folders are in ("" for the working folder)
  std::string host;
  int64_t pid = 0;
  double wall_time = 0;  // seconds since the epoch
};

class TrainingMonitors {
 public:
  // The enabled monitors' folders created and files opened; null when the
  // ds_config enables none.
  static absl::StatusOr<std::unique_ptr<TrainingMonitors>> Open(const DsConfig& ds, FileSystem& fs,
                                                                const MonitorStart& start);

  // Writes the events (a TensorBoard Event per step among them) and flushes
  // every file to the operating system.
  absl::Status Write(const std::vector<MonitorEvent>& events, double wall_time);
  // One line per monitor: where it writes.
  std::vector<std::string> Describe() const;

 private:
  std::unique_ptr<TensorBoardEventFile> tensorboard_;
  std::unique_ptr<CsvMonitor> csv_;
};

}  // namespace dslaunch::runtime
