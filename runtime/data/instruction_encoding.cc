#include "runtime/data/instruction_encoding.h"

namespace dslaunch::runtime {

std::vector<int32_t> EncodeTemplateText(const Tokenizer& tokenizer, absl::string_view text) {
  return tokenizer.Encode(text);
}

EncodedRecord EncodeRecord(const Tokenizer& tokenizer, const std::vector<TextSegment>& segments) {
  EncodedRecord record;
  auto add = [&](const std::vector<int32_t>& ids, bool trained) {
    record.tokens.insert(record.tokens.end(), ids.begin(), ids.end());
    record.loss_mask.insert(record.loss_mask.end(), ids.size(), trained ? 1 : 0);
  };
  if (tokenizer.bos_id() >= 0) add({tokenizer.bos_id()}, false);
  for (const TextSegment& segment : segments) {
    // Note [Special tokens in text]: a record's own text never yields a
    // special id (a user's "<|eot_id|>" stays characters).
    add(segment.template_text ? EncodeTemplateText(tokenizer, segment.text) : tokenizer.EncodePlainText(segment.text),
        segment.trained);
  }
  add({tokenizer.eos_id()}, true);
  return record;
}

}  // namespace dslaunch::runtime
