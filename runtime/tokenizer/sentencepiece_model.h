// A SentencePiece tokenizer.model read by our own code, as the tokenizer.json
// Hugging Face's conversion makes of it (Note [Our own tokenizer.model reader]).
//
// Note [Our own tokenizer.model reader]
// Debian's libsentencepiece carries a private copy of protobuf-lite, which
// clashes with the libprotobuf LibTorch loads: inside dsrank and dsgen it
// cannot parse a model at all (Note [protobuf before sentencepiece] in
// runtime/dsrank/CMakeLists.txt). A tokenizer.model is a small protobuf
// (ModelProto of sentencepiece_model.proto), and the BPE models of the Llama
// 2 family encode with the BPE this layer already has, so we read the file
// ourselves and the library is needed only to train a model (dsprep):
//  - the wire format is read field by field (varint, 32/64-bit, length-
//    delimited); unknown fields are skipped as protobuf does, a truncated or
//    malformed message is an error naming the file and the byte offset;
//  - SentencePiece's BPE merges the adjacent pair whose joined piece has the
//    highest score, equal scores left to right. That is BpeModel with one
//    merge for every way a piece splits into two pieces, ranked by the
//    piece's score (all the splits of one piece share its rank);
//  - only what Llama-family models use is accepted: model_type BPE, the
//    identity normalizer without a character map, escaped whitespace, no
//    extra-whitespace removal, whitespace as a prefix, pieces of type normal,
//    unknown, control and byte. Anything else is refused naming the file and
//    the field (a Unigram model, an NFKC normalizer, an unused piece).
// The result is an HfTokenizerSpec like Hugging Face's LlamaConverter makes:
// Prepend("▁") (with add_dummy_prefix) and Replace(" ", "▁") normalizers, the
// BPE with byte_fallback and fuse_unk, the unknown and control pieces as
// special added tokens (Encode reads "<s>" in text as Hugging Face does;
// EncodePlainText never does), the decoder Replace("▁", " "), ByteFallback,
// Fuse and (with add_dummy_prefix) Strip of one leading space.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/tokenizer/hf_tokenizer_spec.h"

namespace dslaunch::runtime {

// Llama 2's tokenizer.model is 500 KB; Gemma's 256K vocabulary about 4 MB.
inline constexpr size_t kMaxSentencePieceModelFileBytes = size_t{64} << 20;

// The fields of sentencepiece_model.proto that change ids.
struct SentencePieceModelProto {
  enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string piece;
    float score = 0;
    PieceType type = PieceType::kNormal;
  };
  std::vector<Piece> pieces;
  // TrainerSpec (proto defaults where the field is absent).
  int model_type = 1;  // 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;  // -1: none
  int32_t eos_id = 2;
  // NormalizerSpec.
  std::string normalizer_name;
  bool has_precompiled_charsmap = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses the serialized ModelProto; `source` (the file) starts every error.
absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModel(absl::string_view bytes, absl::string_view source);

// The tokenizer a BPE model is (see the Note); anything else is refused.
// Its template_bos/template_eos are the model's bos and eos pieces.
absl::StatusOr<HfTokenizerSpec> HfTokenizerSpecFromSentencePiece(const SentencePieceModelProto& model,
                                                                 absl::string_view source);

// Reads the file at `path` (bounded) and does both.
absl::StatusOr<HfTokenizerSpec> ReadSentencePieceModel(const std::string& path);

}  // namespace dslaunch::runtime
