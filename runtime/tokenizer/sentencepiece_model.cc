#include "runtime/tokenizer/sentencepiece_model.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

// Field numbers of sentencepiece_model.proto.
enum ModelField { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
enum PieceField { kPieceText = 1, kPieceScore = 2, kPieceType = 3 };
enum TrainerField { kModelType = 3, kTreatWhitespaceAsSuffix = 24, kByteFallback = 35, kUnkId = 40, kBosId = 41,
                    kEosId = 42 };
enum NormalizerField { kName = 1, kPrecompiledCharsmap = 2, kAddDummyPrefix = 3, kRemoveExtraWhitespaces = 4,
                       kEscapeWhitespaces = 5 };
enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One message's fields, in order; positions are offsets in the whole file.
class WireReader {
 public:
  WireReader(absl::string_view bytes, size_t base, absl::string_view source)
      : bytes_(bytes), base_(base), source_(source) {}

  bool done() const { return pos_ >= bytes_.size(); }

  struct Field {
    uint32_t number = 0;
    int wire = 0;
    uint64_t varint = 0;           // kVarint
    uint32_t fixed32 = 0;          // kFixed32
    absl::string_view bytes;       // kLengthDelimited
    size_t bytes_offset = 0;       // where `bytes` starts in the file
  };

  absl::StatusOr<Field> Next() {
    const size_t at = pos_;
    DS_ASSIGN_OR_RETURN(uint64_t key, Varint());
    Field field;
    field.number = static_cast<uint32_t>(key >> 3);
    field.wire = static_cast<int>(key & 7);
    if (field.number == 0) return Error(at, "field number 0");
    switch (field.wire) {
      case kVarint: {
        DS_ASSIGN_OR_RETURN(field.varint, Varint());
        return field;
      }
      case kFixed64:
        if (bytes_.size() - pos_ < 8) return Error(at, "truncated 64-bit field");
        pos_ += 8;
        return field;
      case kFixed32:
        if (bytes_.size() - pos_ < 4) return Error(at, "truncated 32-bit field");
        std::memcpy(&field.fixed32, bytes_.data() + pos_, 4);  // little-endian, as x86 and ARM Linux are
        pos_ += 4;
        return field;
      case kLengthDelimited: {
        DS_ASSIGN_OR_RETURN(uint64_t length, Varint());
        if (length > bytes_.size() - pos_) {
          return Error(at, absl::StrCat("field ", field.number, " claims ", length, " bytes but ",
                                        bytes_.size() - pos_, " remain"));
        }
        field.bytes = bytes_.substr(pos_, length);
        field.bytes_offset = base_ + pos_;
        pos_ += length;
        return field;
      }
      default:
        return Error(at, absl::StrCat("field ", field.number, " has wire type ", field.wire,
                                      " (not a protobuf message: groups are not used by sentencepiece)"));
    }
  }

  absl::Status Error(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": not a SentencePiece model: at byte ", base_ + at, ": ", what));
  }

 private:
  absl::StatusOr<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return Error(pos_, "truncated varint");
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return Error(pos_, "varint longer than 10 bytes");
  }

  absl::string_view bytes_;
  size_t base_;
  absl::string_view source_;
  size_t pos_ = 0;
};

absl::Status ExpectWire(const WireReader& reader, const WireReader::Field& field, int wire, absl::string_view name,
                        size_t at) {
  if (field.wire == wire) return absl::OkStatus();
  return reader.Error(at, absl::StrCat(name, " (field ", field.number, ") has wire type ", field.wire,
                                       ", expected ", wire));
}

absl::StatusOr<SentencePieceModelProto::Piece> ParsePiece(absl::string_view bytes, size_t base,
                                                          absl::string_view source) {
  SentencePieceModelProto::Piece piece;
  WireReader reader(bytes, base, source);
  while (!reader.done()) {
    DS_ASSIGN_OR_RETURN(WireReader::Field field, reader.Next());
    if (field.number == kPieceText) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kLengthDelimited, "piece", 0));
      piece.piece = std::string(field.bytes);
    } else if (field.number == kPieceScore) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kFixed32, "score", 0));
      std::memcpy(&piece.score, &field.fixed32, 4);
    } else if (field.number == kPieceType) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kVarint, "type", 0));
      if (field.varint < 1 || field.varint > 6) {
        return reader.Error(0, absl::StrCat("piece type ", field.varint, " is not a SentencePiece piece type"));
      }
      piece.type = static_cast<SentencePieceModelProto::PieceType>(field.varint);
    }
  }
  return piece;
}

std::string TypeName(SentencePieceModelProto::PieceType type) {
  switch (type) {
    case SentencePieceModelProto::PieceType::kNormal: return "NORMAL";
    case SentencePieceModelProto::PieceType::kUnknown: return "UNKNOWN";
    case SentencePieceModelProto::PieceType::kControl: return "CONTROL";
    case SentencePieceModelProto::PieceType::kUserDefined: return "USER_DEFINED";
    case SentencePieceModelProto::PieceType::kUnused: return "UNUSED";
    case SentencePieceModelProto::PieceType::kByte: return "BYTE";
  }
  return "?";
}

constexpr absl::string_view kSpace = "\xE2\x96\x81";  // "▁", SentencePiece's escaped space

}  // namespace

absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModel(absl::string_view bytes, absl::string_view source) {
  SentencePieceModelProto model;
  WireReader reader(bytes, 0, source);
  bool saw_normalizer = false;
  while (!reader.done()) {
    DS_ASSIGN_OR_RETURN(WireReader::Field field, reader.Next());
    if (field.number == kPieces) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kLengthDelimited, "pieces", 0));
      DS_ASSIGN_OR_RETURN(auto piece, ParsePiece(field.bytes, field.bytes_offset, source));
      model.pieces.push_back(std::move(piece));
    } else if (field.number == kTrainerSpec) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kLengthDelimited, "trainer_spec", 0));
      WireReader trainer(field.bytes, field.bytes_offset, source);
      while (!trainer.done()) {
        DS_ASSIGN_OR_RETURN(WireReader::Field f, trainer.Next());
        if (f.wire != kVarint) continue;
        if (f.number == kModelType) model.model_type = static_cast<int>(f.varint);
        if (f.number == kByteFallback) model.byte_fallback = f.varint != 0;
        if (f.number == kTreatWhitespaceAsSuffix) model.treat_whitespace_as_suffix = f.varint != 0;
        // int32 fields: a negative value is the 10-byte two's complement.
        if (f.number == kUnkId) model.unk_id = static_cast<int32_t>(f.varint);
        if (f.number == kBosId) model.bos_id = static_cast<int32_t>(f.varint);
        if (f.number == kEosId) model.eos_id = static_cast<int32_t>(f.varint);
      }
    } else if (field.number == kNormalizerSpec) {
      DS_RETURN_IF_ERROR(ExpectWire(reader, field, kLengthDelimited, "normalizer_spec", 0));
      saw_normalizer = true;
      WireReader normalizer(field.bytes, field.bytes_offset, source);
      while (!normalizer.done()) {
        DS_ASSIGN_OR_RETURN(WireReader::Field f, normalizer.Next());
        if (f.number == kName && f.wire == kLengthDelimited) model.normalizer_name = std::string(f.bytes);
        if (f.number == kPrecompiledCharsmap && f.wire == kLengthDelimited) {
          model.has_precompiled_charsmap = !f.bytes.empty();
        }
        if (f.wire != kVarint) continue;
        if (f.number == kAddDummyPrefix) model.add_dummy_prefix = f.varint != 0;
        if (f.number == kRemoveExtraWhitespaces) model.remove_extra_whitespaces = f.varint != 0;
        if (f.number == kEscapeWhitespaces) model.escape_whitespaces = f.varint != 0;
      }
    }
  }
  if (model.pieces.empty()) return reader.Error(0, "no pieces");
  if (!saw_normalizer) return reader.Error(0, "no normalizer_spec");
  return model;
}

absl::StatusOr<HfTokenizerSpec> HfTokenizerSpecFromSentencePiece(const SentencePieceModelProto& model,
                                                                 absl::string_view source) {
  using Type = SentencePieceModelProto::PieceType;
  auto refuse = [&](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, ": ", what,
                                                   " (tokenizer.model files are read for the BPE models of the "
                                                   "Llama family; a tokenizer.json of the model is read whole)"));
  };
  if (model.model_type != 2) {
    static constexpr const char* kNames[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    return refuse("trainer_spec.model_type",
                  absl::StrCat(model.model_type >= 1 && model.model_type <= 4 ? kNames[model.model_type] : "?", " (",
                               model.model_type, ") is not supported, only BPE"));
  }
  if (model.normalizer_name != "identity" || model.has_precompiled_charsmap) {
    return refuse("normalizer_spec.name",
                  absl::StrCat("\"", model.normalizer_name, "\"",
                               model.has_precompiled_charsmap ? " with a precompiled character map" : "",
                               " is not supported, only \"identity\""));
  }
  if (model.remove_extra_whitespaces) return refuse("normalizer_spec.remove_extra_whitespaces", "true is not supported");
  if (!model.escape_whitespaces) return refuse("normalizer_spec.escape_whitespaces", "false is not supported");
  if (model.treat_whitespace_as_suffix) return refuse("trainer_spec.treat_whitespace_as_suffix", "true is not supported");

  HfTokenizerSpec spec;
  absl::flat_hash_map<std::string, int32_t> vocab;
  std::optional<int32_t> unk_id;
  // Pieces that can be made by merging: SentencePiece's pieces_ (normal ones;
  // unknown, control and byte pieces are looked up by id only).
  std::vector<int32_t> mergeable;
  for (size_t i = 0; i < model.pieces.size(); ++i) {
    const SentencePieceModelProto::Piece& piece = model.pieces[i];
    const int32_t id = static_cast<int32_t>(i);
    const std::string where = absl::StrCat("pieces[", i, "] \"", piece.piece, "\"");
    if (piece.type == Type::kUserDefined || piece.type == Type::kUnused) {
      return refuse(where, absl::StrCat("type ", TypeName(piece.type), " is not supported"));
    }
    if (piece.piece.empty()) return refuse(where, "an empty piece");
    if (!vocab.try_emplace(piece.piece, id).second) return refuse(where, "appears twice");
    if (piece.type == Type::kUnknown) {
      if (unk_id.has_value()) return refuse(where, "a second UNKNOWN piece");
      unk_id = id;
    }
    if (piece.type == Type::kUnknown || piece.type == Type::kControl) {
      spec.added_tokens.push_back(HfAddedToken{id, piece.piece, /*special=*/true});
    }
    if (piece.type == Type::kNormal) mergeable.push_back(id);
  }
  if (!unk_id.has_value()) return refuse("pieces", "no UNKNOWN piece");
  if (*unk_id != model.unk_id) {
    return refuse("trainer_spec.unk_id", absl::StrCat(model.unk_id, " but the UNKNOWN piece is ", *unk_id));
  }
  for (auto [field, id] : {std::pair{"trainer_spec.bos_id", model.bos_id}, std::pair{"trainer_spec.eos_id", model.eos_id}}) {
    if (id < 0 && std::string_view(field) == "trainer_spec.bos_id") continue;
    if (id < 0 || id >= static_cast<int32_t>(model.pieces.size()) || model.pieces[id].type != Type::kControl) {
      return refuse(field, absl::StrCat(id, " is not a CONTROL piece"));
    }
  }
  if (model.bos_id >= 0) spec.template_bos = model.bos_id;
  spec.template_eos = model.eos_id;

  // Every split of a normal piece into two pieces is a merge, ranked by the
  // piece's score (highest first; equal scores share a rank: left to right).
  std::vector<float> scores;
  for (int32_t id : mergeable) scores.push_back(model.pieces[id].score);
  std::sort(scores.begin(), scores.end(), std::greater<float>());
  scores.erase(std::unique(scores.begin(), scores.end()), scores.end());
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<int32_t> ranks;
  for (int32_t id : mergeable) {
    const std::string& text = model.pieces[id].piece;
    const int32_t rank = static_cast<int32_t>(
        std::lower_bound(scores.begin(), scores.end(), model.pieces[id].score, std::greater<float>()) - scores.begin());
    for (size_t cut = 1; cut < text.size(); ++cut) {
      auto left = vocab.find(absl::string_view(text).substr(0, cut));
      auto right = vocab.find(absl::string_view(text).substr(cut));
      if (left == vocab.end() || right == vocab.end()) continue;
      if (model.pieces[left->second].type != Type::kNormal || model.pieces[right->second].type != Type::kNormal) {
        continue;
      }
      merges.emplace_back(left->first, right->first);
      ranks.push_back(rank);
    }
  }
  BpeOptions options;
  options.unk_id = unk_id;
  options.fuse_unk = true;
  options.byte_fallback = model.byte_fallback;
  auto bpe = BpeModel::Create(std::move(vocab), merges, options, ranks);
  if (!bpe.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", bpe.status().message()));
  spec.model = std::move(*bpe);
  spec.vocab_size = static_cast<int>(model.pieces.size());

  if (model.add_dummy_prefix) {
    spec.normalizer.push_back(HfNormalizerStep{HfNormalizerStep::Kind::kPrepend, "", std::string(kSpace)});
  }
  spec.normalizer.push_back(HfNormalizerStep{HfNormalizerStep::Kind::kReplace, " ", std::string(kSpace)});
  HfDecoderStep replace;
  replace.kind = HfDecoderStep::Kind::kReplace;
  replace.pattern = std::string(kSpace);
  replace.content = " ";
  spec.decoder.push_back(replace);
  HfDecoderStep byte_fallback;
  byte_fallback.kind = HfDecoderStep::Kind::kByteFallback;
  spec.decoder.push_back(byte_fallback);
  HfDecoderStep fuse;
  fuse.kind = HfDecoderStep::Kind::kFuse;
  spec.decoder.push_back(fuse);
  if (model.add_dummy_prefix) {
    HfDecoderStep strip;
    strip.kind = HfDecoderStep::Kind::kStrip;
    strip.content = " ";
    strip.start = 1;
    spec.decoder.push_back(strip);
  }
  return spec;
}

absl::StatusOr<HfTokenizerSpec> ReadSentencePieceModel(const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::string bytes, ReadConfigFile(path, "SentencePiece model", kMaxSentencePieceModelFileBytes));
  DS_ASSIGN_OR_RETURN(SentencePieceModelProto model, ParseSentencePieceModel(bytes, path));
  return HfTokenizerSpecFromSentencePiece(model, path);
}

}  // namespace dslaunch::runtime
