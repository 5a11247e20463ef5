#include "runtime/data/indexed_dataset_format.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

// The files are little-endian and the reader uses them in place.
static_assert(std::endian::native == std::endian::little,
              "indexed datasets are read by mmap and need a little-endian host");

namespace {

template <typename T>
void Put(std::string* out, size_t offset, T value) {
  std::memcpy(out->data() + offset, &value, sizeof(T));
}

template <typename T>
T Get(const uint8_t* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

}  // namespace

uint32_t TokenBytesForVocab(int64_t vocab_size) { return vocab_size <= (1 << 16) ? 2 : 4; }

std::string EncodeIndexHeader(const IndexHeader& header) {
  std::string out(kIndexHeaderBytes, '\0');
  std::memcpy(out.data(), kIndexMagic, sizeof(kIndexMagic));
  Put<uint32_t>(&out, 8, kIndexVersion);
  Put<uint32_t>(&out, 12, header.token_bytes);
  Put<int64_t>(&out, 16, header.vocab_size);
  Put<int64_t>(&out, 24, header.document_count);
  Put<int64_t>(&out, 32, header.token_count);
  return out;
}

absl::StatusOr<IndexHeader> ParseIndex(const std::string& path, const uint8_t* data, size_t size,
                                       const int64_t** offsets) {
  auto corrupt = [&](auto&&... what) {
    return absl::DataLossError(absl::StrCat("index file ", path, " is corrupt: ", what...));
  };
  if (size < kIndexHeaderBytes) {
    return corrupt("it has ", size, " bytes, shorter than the ", kIndexHeaderBytes,
                   "-byte header (truncated?)");
  }
  if (std::memcmp(data, kIndexMagic, sizeof(kIndexMagic)) != 0) {
    return corrupt("bad magic (not a DSIDX index)");
  }
  uint32_t version = Get<uint32_t>(data, 8);
  if (version != kIndexVersion) {
    return absl::FailedPreconditionError(absl::StrCat("index file ", path, " has version ",
                                                      version, "; this build reads version ",
                                                      kIndexVersion));
  }
  IndexHeader header;
  header.token_bytes = Get<uint32_t>(data, 12);
  header.vocab_size = Get<int64_t>(data, 16);
  header.document_count = Get<int64_t>(data, 24);
  header.token_count = Get<int64_t>(data, 32);
  if (header.token_bytes != 2 && header.token_bytes != 4) {
    return corrupt("token width ", header.token_bytes, " bytes (expected 2 or 4)");
  }
  if (header.vocab_size <= 0 || TokenBytesForVocab(header.vocab_size) > header.token_bytes) {
    return corrupt("vocab_size ", header.vocab_size, " does not fit ", header.token_bytes,
                   "-byte tokens");
  }
  if (header.document_count < 0 || header.token_count < 0) {
    return corrupt("negative document count ", header.document_count, " or token count ",
                   header.token_count);
  }
  // Divide rather than multiply, so a huge count cannot overflow.
  size_t offset_bytes = size - kIndexHeaderBytes;
  if (offset_bytes % 8 != 0 ||
      offset_bytes / 8 != static_cast<uint64_t>(header.document_count) + 1) {
    return corrupt("it has ", size, " bytes but a header of ", header.document_count,
                   " documents needs ",
                   kIndexHeaderBytes + 8 * (static_cast<uint64_t>(header.document_count) + 1),
                   " (truncated?)");
  }
  // Offsets start at byte 48 of a page-aligned mapping, so they are aligned.
  const int64_t* table = reinterpret_cast<const int64_t*>(data + kIndexHeaderBytes);
  if (table[0] != 0) return corrupt("first document offset is ", table[0], ", not 0");
  for (int64_t d = 0; d < header.document_count; ++d) {
    if (table[d + 1] < table[d]) {
      return corrupt("document ", d, " ends at token ", table[d + 1], " before it starts at ",
                     table[d]);
    }
  }
  if (table[header.document_count] != header.token_count) {
    return corrupt("documents end at token ", table[header.document_count],
                   " but the header counts ", header.token_count, " tokens");
  }
  *offsets = table;
  return header;
}

}  // namespace dslaunch::runtime
