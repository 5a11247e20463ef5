// libFuzzer target: a Hugging Face tokenizer.json (runtime/tokenizer/): the
// JSON parser, the spec read from it, and, when it is a tokenizer this
// runtime builds, an encode and decode of a fixed text.
#include <cstddef>
#include <cstdint>

#include "runtime/tokenizer/hf_tokenizer.h"
#include "runtime/tokenizer/hf_tokenizer_json.h"
#include "runtime/tokenizer/json_value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dslaunch::runtime;
  auto json = ParseJson(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
  if (!json.ok()) return 0;
  auto spec = HfTokenizerSpecFromJson(*json, "fuzz/tokenizer.json");
  if (!spec.ok()) return 0;
  HfTokenizer tokenizer(std::move(*spec), HfSequenceTokens());
  const std::vector<int32_t> ids = tokenizer.Encode("Hello, wörld! 12 3\n\t<s> ¿qué?");
  (void)tokenizer.Decode(ids);
  return 0;
}
