// What the engine says about its NVMe offload (Note [NVMe offload], Note
// [Parameters on NVMe]): where the swap files are, and what a step's swap
// traffic costs on each nvme_path (Note [Swap path probe]).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "runtime/engine/engine.h"
#include "runtime/offload/swap_probe.h"

namespace dslaunch::runtime {

std::string Engine::NvmeOffloadDescription() const {
  if (!zero_) return std::string();
  std::vector<std::string> parts;
  if (zero_->swapped()) {
    parts.push_back(absl::StrCat("optimizer: ", zero_->swapped()->Describe()));
    if (config_.zero_optimization.sub_group_size > kMaxSwapSubGroupElements) {
      absl::StrAppend(&parts.back(), " (zero_optimization.sub_group_size=", config_.zero_optimization.sub_group_size,
                      " cut to ", kMaxSwapSubGroupElements,
                      " elements: three buffer sets of larger sub-groups would hold more host memory than CPU "
                      "offload; Note [Sub-groups on NVMe])");
    }
  }
  for (const auto& [what, partition] : {std::pair{"parameters", zero_.get()},
                                        std::pair{"frozen parameters", frozen_zero_.get()},
                                        std::pair{"expert parameters", expert_zero_.get()}}) {
    if (partition != nullptr && partition->parameter_files() != nullptr) {
      parts.push_back(absl::StrCat(what, ": ", partition->parameter_files()->Describe()));
    }
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<std::vector<std::string>> Engine::ProbeNvmePath(int64_t max_bytes) const {
  // A step's traffic per folder: the optimizer's swap files are read and
  // written once; parameter files are read at every gather (forward and
  // backward of every micro-step: at least twice each) and, when they
  // train, written once.
  struct Traffic {
    SwappedShardOptions probe;
    int64_t read = 0, written = 0, serial_read = 0;
  };
  std::vector<Traffic> paths;
  auto add = [&paths](const std::string& nvme_path, const std::string& name, const BlockIoOptions& io,
                      int64_t read, int64_t written, int64_t serial_read) {
    for (Traffic& t : paths) {
      if (t.probe.nvme_path != nvme_path) continue;
      t.read += read;
      t.written += written;
      t.serial_read += serial_read;
      return;
    }
    Traffic t;
    t.probe.nvme_path = nvme_path;
    t.probe.name = name;
    t.probe.io = io;
    t.read = read;
    t.written = written;
    t.serial_read = serial_read;
    paths.push_back(t);
  };
  if (zero_ && zero_->swapped()) {
    const SwappedShard& swapped = *zero_->swapped();
    add(swapped.options().nvme_path, swapped.options().name, swapped.options().io, swapped.FileBytes(),
        swapped.FileBytes(), 0);
  }
  for (const ZeroPartition* partition : {zero_.get(), frozen_zero_.get(), expert_zero_.get()}) {
    if (partition == nullptr || partition->parameter_files() == nullptr) continue;
    const SwappedPieces& files = *partition->parameter_files();
    // Read during forward and backward; written while the step runs.
    add(files.options().nvme_path, files.options().name, files.options().io, 0,
        partition == frozen_zero_.get() ? 0 : files.file_bytes(),
        2 * config_.gradient_accumulation_steps * files.file_bytes());
  }
  std::vector<std::string> lines;
  for (const Traffic& t : paths) {
    DS_ASSIGN_OR_RETURN(SwapSpeed speed, MeasureSwapSpeed(t.probe, std::min(max_bytes, std::max(t.read + t.serial_read, t.written))));
    const std::string cost = DescribeSwapCost(speed, t.read, t.written, t.serial_read);
    lines.push_back(paths.size() > 1 ? absl::StrCat(t.probe.nvme_path, ": ", cost) : cost);
  }
  return lines;
}

}  // namespace dslaunch::runtime
