// Text <-> token ids. The data module tokenizes at preparation time (dsprep,
// PrepareDataset); the engine only needs vocab_size and eos_id, and Decode for
// printing samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

class SpModel;

// Implementations are immutable after construction, so every method is
// thread-safe (PrepareDataset encodes from several threads).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(absl::string_view text) const = 0;
  // Ids the tokenizer cannot render (eos, out of range) are left out.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;
  // The id a sequence starts with (Llama's <s>, <|begin_of_text|>); -1 when
  // the tokenizer has none.
  virtual int32_t bos_id() const = 0;
  virtual std::string name() const = 0;  // "byte" | "sentencepiece"
};

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

// A trained SentencePiece model (see TrainSentencePieceBpe).
class SentencePieceTokenizer : public Tokenizer {
 public:
  // Fails when the file is missing or not a model, or when it has no eos id.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override;
  int32_t eos_id() const override;
  int32_t bos_id() const override;
  std::string name() const override { return "sentencepiece"; }

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<SpModel> model);

  std::unique_ptr<SpModel> model_;
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

// kind "byte" (model_path ignored) or "sentencepiece" (loads model_path).
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(absl::string_view kind,
                                                         const std::string& model_path);

}  // namespace dslaunch::runtime
