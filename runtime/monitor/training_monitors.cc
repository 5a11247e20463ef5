#include "runtime/monitor/training_monitors.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

std::string MonitorFolder(const MonitorConfig& monitor) {
  if (monitor.output_path.empty() || (!monitor.job_name.empty() && monitor.job_name.front() == '/')) {
    return monitor.job_name;
  }
  if (monitor.job_name.empty()) return monitor.output_path;
  absl::string_view base = monitor.output_path;
  while (base.size() > 1 && absl::ConsumeSuffix(&base, "/")) {
  }
  return absl::StrCat(base, base == "/" ? "" : "/", monitor.job_name);
}

namespace {

std::string FolderOf(const MonitorConfig& monitor, const MonitorStart& start) {
  const std::string folder = MonitorFolder(monitor);
  if (start.relative_to.empty() || (!folder.empty() && folder.front() == '/')) return folder;
  return absl::StrCat(start.relative_to, "/", folder);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingMonitors>> TrainingMonitors::Open(const DsConfig& ds, FileSystem& fs,
                                                                         const MonitorStart& start) {
  if (!ds.tensorboard.enabled && !ds.csv_monitor.enabled) return nullptr;
  std::unique_ptr<TrainingMonitors> monitors(new TrainingMonitors());
  if (ds.tensorboard.enabled) {
    const std::string folder = FolderOf(ds.tensorboard, start);
    DS_RETURN_IF_ERROR(fs.CreateDirectories(folder));
    DS_ASSIGN_OR_RETURN(monitors->tensorboard_,
                        TensorBoardEventFile::Create(fs, folder, start.host, start.pid, start.wall_time));
    // Note [TensorBoard event files]: what earlier attempts wrote after the
    // step this one resumes after is dropped by TensorBoard.
    DS_RETURN_IF_ERROR(monitors->tensorboard_->WriteStart(start.resume_after + 1, start.wall_time));
    DS_RETURN_IF_ERROR(monitors->tensorboard_->Flush());
  }
  if (ds.csv_monitor.enabled) {
    const std::string folder = FolderOf(ds.csv_monitor, start);
    DS_RETURN_IF_ERROR(fs.CreateDirectories(folder));
    monitors->csv_ = std::make_unique<CsvMonitor>(fs, folder, start.resume_after);
  }
  return monitors;
}

absl::Status TrainingMonitors::Write(const std::vector<MonitorEvent>& events, double wall_time) {
  if (tensorboard_) {
    for (size_t begin = 0; begin < events.size();) {
      size_t end = begin;
      std::vector<std::pair<std::string, double>> scalars;
      for (; end < events.size() && events[end].step == events[begin].step; ++end) {
        scalars.emplace_back(events[end].name, events[end].value);
      }
      DS_RETURN_IF_ERROR(tensorboard_->WriteScalars(events[begin].step, wall_time, scalars));
      begin = end;
    }
    DS_RETURN_IF_ERROR(tensorboard_->Flush());
  }
  if (csv_) {
    DS_RETURN_IF_ERROR(csv_->Write(events));
    DS_RETURN_IF_ERROR(csv_->Flush());
  }
  return absl::OkStatus();
}

std::vector<std::string> TrainingMonitors::Describe() const {
  std::vector<std::string> lines;
  if (tensorboard_) lines.push_back(absl::StrCat("tensorboard: ", tensorboard_->path()));
  if (csv_) lines.push_back(absl::StrCat("csv_monitor: ", csv_->folder(), "/<metric>.csv"));
  return lines;
}

}  // namespace dslaunch::runtime
