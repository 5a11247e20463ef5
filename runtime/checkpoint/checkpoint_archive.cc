#include "runtime/checkpoint/checkpoint_archive.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

double ReadDouble(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toDouble();
}

absl::Status LoadArchive(FileSystem& fs, const std::string& path, torch::Device device,
                         torch::serialize::InputArchive& archive) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  absl::Status read_error;
  auto read = [&](uint64_t offset, void* buffer, size_t size) -> size_t {
    absl::StatusOr<size_t> n = file->Read(offset, static_cast<char*>(buffer), size);
    if (!n.ok()) {
      if (read_error.ok()) read_error = n.status();
      return 0;
    }
    return *n;
  };
  try {
    archive.load_from(read, [&]() -> size_t { return static_cast<size_t>(file->size()); }, device);
  } catch (const c10::Error& e) {
    if (!read_error.ok()) return read_error;
    return absl::DataLossError(absl::StrCat("load ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // TorchScript archive errors are not c10::Errors
    if (!read_error.ok()) return read_error;
    return absl::DataLossError(absl::StrCat("load ", path, ": ", e.what()));
  }
  return read_error;
}

}  // namespace dslaunch::runtime
