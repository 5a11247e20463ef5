// The only door to libsentencepiece, in plain std types.
//
// Note [SentencePiece and Abseil]
// Debian's <sentencepiece_processor.h> (0.1.97) declares
//   namespace absl { using std::string_view; }
// which collides with Abseil 20220623, where absl::string_view is its own
// class. So the sentencepiece headers are included by exactly one file,
// sentencepiece_bridge.cc, which includes no Abseil header, and this header
// uses std types only. (At link time there is no clash: the system Abseil
// lives in an inline namespace, sentencepiece's private copy does not.)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::runtime {

// Outcome of a bridge call. `code` is a canonical status code: sentencepiece's
// util::StatusCode numbers its codes exactly as absl::StatusCode does. No
// exception leaves the bridge: one thrown inside sentencepiece (its file
// reading throws std::ios_base::failure) comes back as code 13 (internal).
struct SpResult {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
};

// A loaded SentencePiece model. Encode/Decode are const and thread-safe
// (SentencePieceProcessor's are); Load is not.
class SpModel {
 public:
  SpModel();
  ~SpModel();

  // Loads a model from its bytes (the caller reads the file: Note [Bounded
  // input files] in common/bounded_file.h).
  SpResult LoadSerialized(const std::string& model_bytes);
  SpResult Encode(std::string_view text, std::vector<int>* ids) const;
  SpResult Decode(const std::vector<int>& ids, std::string* text) const;
  int vocab_size() const;
  int eos_id() const;
  int bos_id() const;  // -1 when the model has none
  // The id of `piece`, or -1 when the model has no such piece.
  int PieceToId(std::string_view piece) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Trains a byte-fallback BPE model on the lines of `text_files` and returns
// the serialized model in `*model` (nothing is written to disk). Deterministic:
// one thread, every sentence in file order, a fixed seed, and no file name
// inside the model. The settings: Note [BPE training settings] in the .cc.
SpResult SpTrainBpe(const std::vector<std::string>& text_files, int vocab_size,
                    std::string* model);

}  // namespace dslaunch::runtime
