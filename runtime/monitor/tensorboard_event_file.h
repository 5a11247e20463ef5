// A TensorBoard event file of scalar curves, written without TensorFlow.
//
// Note [TensorBoard event files]
// A TensorBoard log folder holds files named
//   events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>
// and TensorBoard reads every such file in it. Each file is a sequence of
// TFRecords:
//   uint64 length of the data (little-endian)
//   uint32 MaskedCrc32c of those 8 bytes
//   the data: one serialized Event (proto/tensorboard_event.proto)
//   uint32 MaskedCrc32c of the data
// The first Event carries file_version "brain.Event:2". Each training step's
// scalars are one Event at that step, with one Summary value per scalar
// (simple_value, a float). A run that resumes from a checkpoint writes a
// SessionLog START at its first step: TensorBoard then drops what earlier
// attempts wrote at or after that step, so a curve shows each step once.
// Records are flushed to the operating system after every step, so a crash
// loses at most the step being written; a torn last record is what
// TensorBoard already skips.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

// One TFRecord around `data` (exposed for tests).
std::string TfRecord(absl::string_view data);

// events.out.tfevents.<seconds>.<host>.<pid>.0
std::string TensorBoardEventFileName(double wall_time, const std::string& host, int64_t pid);

class TensorBoardEventFile {
 public:
  // Creates the file in `folder` (which must exist) and writes its
  // file_version record.
  static absl::StatusOr<std::unique_ptr<TensorBoardEventFile>> Create(FileSystem& fs, const std::string& folder,
                                                                      const std::string& host, int64_t pid,
                                                                      double wall_time);

  // A SessionLog START at `step`: TensorBoard drops earlier events at or
  // after it.
  absl::Status WriteStart(int64_t step, double wall_time);
  // One Event at `step` holding every (tag, value) pair.
  absl::Status WriteScalars(int64_t step, double wall_time,
                            const std::vector<std::pair<std::string, double>>& scalars);
  absl::Status Flush() { return file_->Flush(); }
  absl::Status Close() { return file_->Close(); }
  const std::string& path() const { return file_->path(); }

 private:
  explicit TensorBoardEventFile(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {}
  absl::Status WriteEvent(const std::string& serialized_event);

  std::unique_ptr<WritableFile> file_;
};

}  // namespace dslaunch::runtime
