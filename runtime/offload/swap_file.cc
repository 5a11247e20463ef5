#include "runtime/offload/swap_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/fs/file_system.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dslaunch::runtime {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'S', 'W', 'A', 'P', '0', '1'};


void PutWord(unsigned char* at, uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t GetWord(const unsigned char* at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return value;
}

}  // namespace

SwapBuffer SwapBuffer::Allocate(int64_t elements) {
  SwapBuffer buffer;
  buffer.elements = elements;
  void* block = nullptr;
  TORCH_CHECK(::posix_memalign(&block, kSwapAlignment, static_cast<size_t>(SwapFileBytes(elements))) == 0,
              "NVMe offload: cannot allocate a ", SwapFileBytes(elements), "-byte swap buffer");
  std::memset(block, 0, static_cast<size_t>(SwapFileBytes(elements)));
  buffer.block_ = std::shared_ptr<void>(block, [](void* p) { std::free(p); });
  // The tensor keeps the block alive: a view handed out survives the buffer.
  std::shared_ptr<void> keep = buffer.block_;
  buffer.values = torch::from_blob(
      static_cast<char*>(block) + kSwapHeaderBytes, {elements}, [keep](void*) mutable { keep.reset(); },
      torch::TensorOptions().dtype(torch::kFloat));
  return buffer;
}

void SealSwapBuffer(SwapBuffer& buffer) {
  auto* header = static_cast<unsigned char*>(buffer.block());
  std::memset(header, 0, kSwapHeaderBytes);
  std::memcpy(header, kMagic, sizeof(kMagic));
  const int64_t bytes = buffer.elements * static_cast<int64_t>(sizeof(float));
  PutWord(header + 8, static_cast<uint64_t>(bytes));
  PutWord(header + 16, static_cast<uint64_t>(buffer.elements));
  PutWord(header + 24, XXH3_64bits(header + kSwapHeaderBytes, static_cast<size_t>(bytes)));
}

absl::Status CheckSwapBuffer(const SwapBuffer& buffer, const std::string& file) {
  const auto* header = static_cast<const unsigned char*>(buffer.block());
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("swap file ", file, ": not a dslaunch swap file (bad magic)"));
  }
  const int64_t bytes = buffer.elements * static_cast<int64_t>(sizeof(float));
  const uint64_t recorded_bytes = GetWord(header + 8), recorded_elements = GetWord(header + 16);
  if (recorded_bytes != static_cast<uint64_t>(bytes) || recorded_elements != static_cast<uint64_t>(buffer.elements)) {
    return absl::DataLossError(absl::StrCat("swap file ", file, " holds ", recorded_elements, " values (",
                                            recorded_bytes, " bytes); this shard needs ", buffer.elements, " (",
                                            bytes, " bytes)"));
  }
  const uint64_t checksum = XXH3_64bits(header + kSwapHeaderBytes, static_cast<size_t>(bytes));
  if (checksum != GetWord(header + 24)) {
    return absl::DataLossError(absl::StrCat("swap file ", file,
                                            ": checksum mismatch (the file changed after it was written)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> OpenSwapFile(const std::string& path, bool create, bool* direct) {
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
  *direct = fd >= 0;
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), flags, 0600);  // no O_DIRECT on this file system
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("swap file ", path, ": ", std::strerror(errno)));
  return fd;
}

absl::StatusOr<std::string> FreshSwapFolder(const std::string& nvme_path, const std::string& name) {
  const std::string folder = absl::StrCat(nvme_path, "/dslaunch-swap/", name);
  FileSystem& fs = FileSystem::Default();
  if (absl::Status removed = fs.RemoveTree(folder); !removed.ok()) return removed;
  if (absl::Status made = fs.CreateDirectories(folder); !made.ok()) return made;
  return folder;
}

}  // namespace dslaunch::runtime
