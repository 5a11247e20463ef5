// Text <-> token ids. The data module tokenizes at preparation time (dsprep,
// PrepareDataset); the engine only needs vocab_size and eos_id, and Decode for
// printing samples.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

class SpModel;

// Implementations are immutable after construction, so every method is
// thread-safe (PrepareDataset encodes from several threads).
//
// Note [Special tokens in text]
// Encode never adds bos or eos: a caller that follows the model's convention
// adds bos_id() itself when adds_bos() says so (dstokenize --add_bos, the
// data module's prompt builder). Strings of special tokens inside the text:
//  - Encode(text) does what the tokenizer does by default: a Hugging Face
//    tokenizer.json matches its added tokens in the text, so
//    "<|start_header_id|>user<|end_header_id|>" gives the three special ids
//    128006, 882, 128007, exactly as transformers' tokenizer(text,
//    add_special_tokens=False); SentencePiece and byte tokenizers have no
//    such step and encode "<s>" as the characters '<', 's', '>'.
//  - EncodePlainText(text) never yields a special id from the text (a
//    "<|eot_id|>" typed by a user is ordinary characters; transformers'
//    split_special_tokens=True): for user content in instruction data.
//  - TokenId("<|eot_id|>") is the id to put between such pieces.
// So a chat prompt is built as TokenId(header) + EncodePlainText(role) + ...,
// and no user text can forge a special token.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids of `text`, without bos/eos (Note [Special tokens in text]).
  virtual std::vector<int32_t> Encode(absl::string_view text) const = 0;
  // Ids of `text` with special-token strings encoded as ordinary text.
  virtual std::vector<int32_t> EncodePlainText(absl::string_view text) const { return Encode(text); }
  // Ids the tokenizer cannot render (bos, eos and other special tokens, out
  // of range) are left out.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;
  // The id a sequence starts with (Llama's <s>, <|begin_of_text|>); -1 when
  // the tokenizer has none.
  virtual int32_t bos_id() const = 0;
  // Whether the model's own pipeline starts each sequence with bos_id() /
  // ends it with eos_id() (a tokenizer.json post_processor template,
  // tokenizer_config.json's add_bos_token/add_eos_token, Llama 2's
  // SentencePiece default). Encode adds neither; callers do.
  virtual bool adds_bos() const { return false; }
  virtual bool adds_eos() const { return false; }
  // The id of one token string: a special token ("<|eot_id|>", "</s>") or a
  // vocabulary piece ("▁the"); nullopt when the vocabulary has no such token.
  virtual std::optional<int32_t> TokenId(absl::string_view token) const { return std::nullopt; }
  virtual std::string name() const = 0;  // "byte" | "sentencepiece" | "hf"
};

// The text `ids` add after `context`: the decode of both minus the decode of
// the context (from where the two first differ, so a context that ends
// inside a character is completed). A continuation reads as it does after
// its prompt: a SentencePiece word-start piece keeps its space, as
// transformers' pipelines and vLLM give it.
std::string DecodeAfter(const Tokenizer& tokenizer, const std::vector<int32_t>& context,
                        const std::vector<int32_t>& ids);
// What `after` holds past the longest prefix it shares with `before`: the
// text a decode gained when tokens were added (DecodeAfter, TextStreamer).
std::string TextPastCommonPrefix(const std::string& before, const std::string& after);
// The last few tokens of `tokens`: enough context for DecodeAfter.
std::vector<int32_t> DecodingContext(const std::vector<int64_t>& tokens);
// Each token's text in the middle of a text (DecodeAfter a plain word), by
// id: the bytes constrained output steps through (Note [Constrained output],
// runtime/generate/output_constraint.h). Empty for a token whose text is
// empty (a special token) or not whole UTF-8 alone (a byte-fallback piece).
std::vector<std::string> TokenBytesOf(const Tokenizer& tokenizer);
// Whether `text` is whole, valid UTF-8 with no U+FFFD (a decoder's mark for
// bytes it could not read).
bool IsWholeUtf8(absl::string_view text);

// Ids 0..255 are the bytes of the text, 256 is eos; vocab_size 257.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEosId = 256;

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return kEosId + 1; }
  int32_t eos_id() const override { return kEosId; }
  int32_t bos_id() const override { return -1; }
  std::string name() const override { return "byte"; }
};

// A SentencePiece model: one dsprep trained (see TrainSentencePieceBpe) or
// a model folder's tokenizer.model (LoadModelTokenizer). The model's own
// normalization applies (Llama 2's dummy prefix: "Hi" is encoded as " Hi").
class SentencePieceTokenizer : public Tokenizer {
 public:
  // Fails when the file is missing or not a model, or when it has no eos id.
  // `adds_bos`/`adds_eos`: the model's convention (Llama 2: bos, no eos).
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path, bool adds_bos = false, bool adds_eos = false);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override;
  int32_t eos_id() const override;
  int32_t bos_id() const override;
  bool adds_bos() const override { return adds_bos_; }
  bool adds_eos() const override { return adds_eos_; }
  std::optional<int32_t> TokenId(absl::string_view token) const override;
  std::string name() const override { return "sentencepiece"; }

 private:
  SentencePieceTokenizer(std::unique_ptr<SpModel> model, bool adds_bos, bool adds_eos);

  std::unique_ptr<SpModel> model_;
  const bool adds_bos_;
  const bool adds_eos_;
};

// Trains a deterministic byte-fallback BPE model on the lines of `text_files`
// and writes it to `<model_prefix>.model` atomically (through a fsynced
// `.model.tmp` and a rename); the same files always give the same bytes. No
// `.vocab` listing is written. With byte fallback the
// vocabulary holds 3 special pieces (unk 0, bos 1, eos 2), the 256 bytes and
// every character of the corpus, so vocab_size must exceed that; a corpus too
// small for vocab_size yields a smaller model rather than an error.
absl::Status TrainSentencePieceBpe(const std::vector<std::string>& text_files, int vocab_size,
                                   const std::string& model_prefix);

// kind "byte" (model_path ignored), "sentencepiece" (loads model_path, a
// model dsprep trained), or "hf" (a model's own tokenizer: model_path is a
// tokenizer.json, a tokenizer.model or a folder holding one; see
// LoadModelTokenizer in model_tokenizer.h).
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(absl::string_view kind,
                                                         const std::string& model_path);

}  // namespace dslaunch::runtime
