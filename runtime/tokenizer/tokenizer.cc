#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "runtime/fs/file_system.h"
#include "runtime/tokenizer/model_tokenizer.h"
#include "runtime/tokenizer/sentencepiece_bridge.h"

namespace dslaunch::runtime {
namespace {

// A 2M-piece vocabulary (the most a job file may ask for) serializes to about
// 60 MB; anything far larger is not a model.
constexpr size_t kMaxSentencePieceModelBytes = size_t{256} << 20;

absl::Status ToStatus(const SpResult& result, absl::string_view context) {
  if (result.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(result.code),
                      absl::StrCat(context, ": ", result.message));
}

}  // namespace

std::vector<int32_t> ByteTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) text.push_back(static_cast<char>(id));
  }
  return text;
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& model_path, bool adds_bos, bool adds_eos) {
  // Note [Bounded input files]: a directory, a FIFO or a device is refused by
  // name here; sentencepiece's own reader threw std::ios_base::failure on a
  // directory (an abort in dsprep).
  absl::StatusOr<std::string> bytes =
      ReadConfigFile(model_path, "sentencepiece model", kMaxSentencePieceModelBytes);
  if (!bytes.ok()) return bytes.status();
  auto model = std::make_unique<SpModel>();
  absl::Status loaded = ToStatus(model->LoadSerialized(*bytes),
                                 absl::StrCat("cannot load sentencepiece model ", model_path));
  if (!loaded.ok() && absl::StrContains(loaded.message(), "Protocol Buffer")) {
    // Note [protobuf before sentencepiece] (runtime/dsrank/CMakeLists.txt):
    // in a process that also loads LibTorch's libprotobuf (dsrank, dsgen),
    // libsentencepiece's own protobuf code binds to it and refuses the model.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load sentencepiece model ", model_path,
        " in this process: Debian's libsentencepiece carries its own protobuf, which clashes with the one "
        "LibTorch loads; use a tokenizer.json (Hugging Face Llama folders carry one beside tokenizer.model), "
        "or prepare the data with dsprep and point data.prepared at it"));
  }
  if (!loaded.ok()) return loaded;
  if (model->eos_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sentencepiece model ", model_path,
                     " has no eos piece; documents could not be separated"));
  }
  if (adds_bos && model->bos_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sentencepiece model ", model_path, " has no bos piece, but sequences should start with one"));
  }
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(std::move(model), adds_bos, adds_eos));
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<SpModel> model, bool adds_bos, bool adds_eos)
    : model_(std::move(model)), adds_bos_(adds_bos), adds_eos_(adds_eos) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

// SentencePiece's Encode fails only on an unloaded model, which Load rules
// out, so its status carries no information here.
std::vector<int32_t> SentencePieceTokenizer::Encode(absl::string_view text) const {
  std::vector<int> ids;
  model_->Encode(std::string_view(text.data(), text.size()), &ids);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<int> known;
  known.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size() && id != eos_id() && id != bos_id()) known.push_back(id);
  }
  std::string text;
  model_->Decode(known, &text);
  return text;
}

int SentencePieceTokenizer::vocab_size() const { return model_->vocab_size(); }
int32_t SentencePieceTokenizer::eos_id() const { return model_->eos_id(); }
int32_t SentencePieceTokenizer::bos_id() const { return model_->bos_id(); }

std::optional<int32_t> SentencePieceTokenizer::TokenId(absl::string_view token) const {
  const int id = model_->PieceToId(std::string_view(token.data(), token.size()));
  if (id < 0) return std::nullopt;
  return id;
}

absl::Status TrainSentencePieceBpe(const std::vector<std::string>& text_files, int vocab_size,
                                   const std::string& model_prefix) {
  if (text_files.empty()) {
    return absl::InvalidArgumentError("sentencepiece training needs at least one text file");
  }
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sentencepiece vocab_size must be positive, got ", vocab_size));
  }
  const std::string path = model_prefix + ".model";
  std::string model;
  DS_RETURN_IF_ERROR(ToStatus(
      SpTrainBpe(text_files, vocab_size, &model),
      absl::StrCat("training sentencepiece BPE (vocab_size ", vocab_size, ") for ", path)));
  return WriteFileAtomically(FileSystem::Default(), path, model);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(absl::string_view kind,
                                                         const std::string& model_path) {
  if (kind == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (kind == "sentencepiece") {
    if (model_path.empty()) {
      return absl::InvalidArgumentError("tokenizer sentencepiece needs a model path");
    }
    auto tokenizer = SentencePieceTokenizer::Load(model_path);
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
  }
  if (kind == "hf") {
    if (model_path.empty()) {
      return absl::InvalidArgumentError(
          "tokenizer hf needs a path (a tokenizer.json, a tokenizer.model or a model folder)");
    }
    return LoadModelTokenizer(model_path);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tokenizer \"", kind, "\" (expected byte, sentencepiece or hf)"));
}

std::string DecodeAfter(const Tokenizer& tokenizer, const std::vector<int32_t>& context,
                        const std::vector<int32_t>& ids) {
  const std::string before = tokenizer.Decode(context);
  std::vector<int32_t> all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  return TextPastCommonPrefix(before, tokenizer.Decode(all));
}

std::string TextPastCommonPrefix(const std::string& before, const std::string& after) {
  size_t common = 0;
  const size_t limit = std::min(before.size(), after.size());
  while (common < limit && before[common] == after[common]) ++common;
  return after.substr(common);
}

bool IsWholeUtf8(absl::string_view text) {
  if (absl::StrContains(text, "\xEF\xBF\xBD")) return false;
  while (!text.empty()) {
    const size_t length = Utf8SequenceLength(text);
    if (length == 0) return false;
    text.remove_prefix(length);
  }
  return true;
}

std::vector<std::string> TokenBytesOf(const Tokenizer& tokenizer) {
  const std::vector<int32_t> context = tokenizer.EncodePlainText("a");
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    std::string text = DecodeAfter(tokenizer, context, {id});
    if (IsWholeUtf8(text)) bytes[static_cast<size_t>(id)] = std::move(text);
  }
  return bytes;
}

std::vector<int32_t> DecodingContext(const std::vector<int64_t>& tokens) {
  constexpr size_t kContext = 4;
  const size_t first = tokens.size() > kContext ? tokens.size() - kContext : 0;
  return std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(first), tokens.end());
}

}  // namespace dslaunch::runtime
