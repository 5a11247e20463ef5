// DeepSpeed's csv_monitor: one CSV file per metric in the log folder.
//
// Note [CSV monitor files]
// As DeepSpeed writes them: the metric "Train/Samples/train_loss" goes to
// <folder>/Train_Samples_train_loss.csv ('/' and ' ' become '_'), whose
// first row is "step,train_loss" (the name's last part) and each further
// row "<step>,<value>". Values are written in the shortest form that reads
// back as the same double. Where DeepSpeed appends a second header and
// repeats the steps a failed attempt already logged, a file met again here
// keeps its header and the rows up to the step this attempt resumes after,
// and loses the rest (rewritten atomically before the first append), so a
// restarted job's CSV holds each step once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/monitor/monitor_event.h"

namespace dslaunch::runtime {

// "Train/Samples/train_loss" -> "Train_Samples_train_loss.csv".
std::string CsvMonitorFileName(const std::string& metric);
// A double in its shortest round-trip form ("0.1", "2.3456789e-05").
std::string ShortestDouble(double value);

class CsvMonitor {
 public:
  // `folder` must exist. Rows with a step above `resume_after` in files
  // already there are dropped when the metric is first written.
  CsvMonitor(FileSystem& fs, std::string folder, int64_t resume_after)
      : fs_(fs), folder_(std::move(folder)), resume_after_(resume_after) {}

  absl::Status Write(const std::vector<MonitorEvent>& events);
  // Every file's rows handed to the operating system.
  absl::Status Flush();
  const std::string& folder() const { return folder_; }

 private:
  absl::StatusOr<WritableFile*> FileFor(const std::string& metric);

  FileSystem& fs_;
  const std::string folder_;
  const int64_t resume_after_;
  std::map<std::string, std::unique_ptr<WritableFile>> files_;
};

}  // namespace dslaunch::runtime
