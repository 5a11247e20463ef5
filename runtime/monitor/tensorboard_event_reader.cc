#include "runtime/monitor/tensorboard_event_reader.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "proto/tensorboard_event.pb.h"
#include "runtime/monitor/crc32c.h"

namespace dslaunch::runtime {
namespace {

uint64_t LittleEndian64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

uint32_t LittleEndian32(const char* bytes) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

// A SessionLog START at `step`: what was logged at or after it goes.
void Purge(TensorBoardScalars& scalars, int64_t step) {
  for (auto& [tag, points] : scalars.by_tag) {
    std::erase_if(points, [&](const ScalarPoint& point) { return point.step >= step; });
  }
}

absl::Status ReadFile(const std::string& path, TensorBoardScalars& scalars) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) break;  // a torn header
    const char* header = bytes.data() + at;
    if (LittleEndian32(header + 8) != MaskedCrc32c(absl::string_view(header, 8))) {
      return absl::DataLossError(absl::StrCat(path, ": the length of the record at byte ", at, " fails its CRC"));
    }
    const uint64_t length = LittleEndian64(header);
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) break;  // a torn record
    const absl::string_view data(header + 12, length);
    if (LittleEndian32(header + 12 + length) != MaskedCrc32c(data)) {
      return absl::DataLossError(absl::StrCat(path, ": the record at byte ", at, " fails its CRC"));
    }
    tensorboard::Event event;
    if (!event.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
      return absl::DataLossError(absl::StrCat(path, ": the record at byte ", at, " is not an Event"));
    }
    if (event.has_session_log() && event.session_log().status() == tensorboard::SessionLog::START) {
      Purge(scalars, event.step());
    }
    if (event.has_summary()) {
      for (const auto& value : event.summary().value()) {
        if (value.value_case() != tensorboard::Summary::Value::kSimpleValue) continue;
        scalars.by_tag[value.tag()].push_back({event.step(), event.wall_time(), value.simple_value()});
      }
    }
    at += 12 + length + 4;
  }
  if (at < bytes.size()) ++scalars.torn_records;
  ++scalars.files;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorBoardScalars> ReadTensorBoardScalars(const std::vector<std::string>& files) {
  TensorBoardScalars scalars;
  for (const std::string& path : files) {
    if (absl::Status read = ReadFile(path, scalars); !read.ok()) return read;
  }
  return scalars;
}

}  // namespace dslaunch::runtime
