// libFuzzer target: a SentencePiece tokenizer.model (a serialized
// ModelProto, read by our own wire-format reader in runtime/tokenizer/), and
// the tokenizer spec made from it.
#include <cstddef>
#include <cstdint>

#include "runtime/tokenizer/sentencepiece_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dslaunch::runtime;
  auto model = ParseSentencePieceModel(absl::string_view(reinterpret_cast<const char*>(data), size),
                                       "fuzz/tokenizer.model");
  if (!model.ok()) return 0;
  (void)HfTokenizerSpecFromSentencePiece(*model, "fuzz/tokenizer.model");
  return 0;
}
