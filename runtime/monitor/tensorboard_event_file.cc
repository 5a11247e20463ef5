#include "runtime/monitor/tensorboard_event_file.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "proto/tensorboard_event.pb.h"
#include "runtime/monitor/crc32c.h"

namespace dslaunch::runtime {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

std::string Serialized(const tensorboard::Event& event) {
  std::string bytes;
  event.SerializeToString(&bytes);
  return bytes;
}

}  // namespace

std::string TfRecord(absl::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &record);
  AppendLittleEndian(MaskedCrc32c(record), 4, &record);
  record.append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data), 4, &record);
  return record;
}

std::string TensorBoardEventFileName(double wall_time, const std::string& host, int64_t pid) {
  return absl::StrFormat("events.out.tfevents.%010d.%s.%d.0", static_cast<int64_t>(wall_time), host, pid);
}

absl::StatusOr<std::unique_ptr<TensorBoardEventFile>> TensorBoardEventFile::Create(FileSystem& fs,
                                                                                   const std::string& folder,
                                                                                   const std::string& host,
                                                                                   int64_t pid, double wall_time) {
  const std::string path = absl::StrCat(folder, "/", TensorBoardEventFileName(wall_time, host, pid));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(path));
  std::unique_ptr<TensorBoardEventFile> events(new TensorBoardEventFile(std::move(file)));
  tensorboard::Event version;
  version.set_wall_time(wall_time);
  version.set_file_version("brain.Event:2");
  DS_RETURN_IF_ERROR(events->WriteEvent(Serialized(version)));
  DS_RETURN_IF_ERROR(events->Flush());
  return events;
}

absl::Status TensorBoardEventFile::WriteStart(int64_t step, double wall_time) {
  tensorboard::Event start;
  start.set_wall_time(wall_time);
  start.set_step(step);
  start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  return WriteEvent(Serialized(start));
}

absl::Status TensorBoardEventFile::WriteScalars(int64_t step, double wall_time,
                                                const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(Serialized(event));
}

absl::Status TensorBoardEventFile::WriteEvent(const std::string& serialized_event) {
  return file_->Append(TfRecord(serialized_event));
}

}  // namespace dslaunch::runtime
