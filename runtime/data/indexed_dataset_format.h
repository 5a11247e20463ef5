// The on-disk layout of an indexed dataset, shared by its writer and reader.
//
// Note [Indexed dataset layout]
// A dataset with prefix P is two files:
//
//   P.bin  the token ids of every document back to back, little-endian,
//          uint16 when every id fits (vocab_size <= 65536), else uint32.
//   P.idx  a 48-byte header followed by document_count + 1 int64 offsets:
//
//     offset  size  field
//          0     8  magic "DSIDX\0\0\0"
//          8     4  uint32 version (1)
//         12     4  uint32 token_bytes: 2 (uint16) or 4 (uint32)
//         16     8  int64 vocab_size
//         24     8  int64 document_count N
//         32     8  int64 token_count (== offsets[N]; P.bin holds token_count * token_bytes bytes)
//         40     8  reserved, 0
//         48  8(N+1) int64 offsets: document d is tokens [offsets[d], offsets[d+1])
//
// Offsets count tokens, not bytes, starting at 0 and never decreasing.
// Documents carry their own end: PrepareDataset appends the tokenizer's eos to
// each one, so the token stream is just the concatenation (Note [Token stream]
// in gpt_samples.h). P.idx is written last and is the commit record: a
// dataset exists exactly when P.idx does (IndexedDatasetWriter::Finish).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

inline constexpr char kIndexMagic[8] = {'D', 'S', 'I', 'D', 'X', '\0', '\0', '\0'};
inline constexpr uint32_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 48;

struct IndexHeader {
  uint32_t token_bytes = 2;
  int64_t vocab_size = 0;
  int64_t document_count = 0;
  int64_t token_count = 0;
};

// 2 when every id of the vocabulary fits in uint16, else 4.
uint32_t TokenBytesForVocab(int64_t vocab_size);

// The header's 48 bytes, to be followed by the offsets.
std::string EncodeIndexHeader(const IndexHeader& header);

// Checks a whole .idx image (`path` only names it in errors): magic, version,
// token_bytes, vocab_size, that the size is exactly header + (N+1) offsets,
// and that offsets start at 0, never decrease and end at token_count. On
// success `*offsets` points at the N+1 offsets inside `data`.
absl::StatusOr<IndexHeader> ParseIndex(const std::string& path, const uint8_t* data, size_t size,
                                       const int64_t** offsets);

}  // namespace dslaunch::runtime
