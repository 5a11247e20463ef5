// Text segments (instruction_format.h) -> the tokens of one training sequence
// and which of them are labels.
//
// Note [Segments are tokenized apart]
// A record's sequence is [bos] + Encode(segment 1) + Encode(segment 2) + ...
// + [eos]: each segment is encoded on its own and the pieces concatenated, so
// the boundary between prompt and response falls exactly between two tokens
// and the loss mask never has to guess which token a boundary-crossing merge
// belongs to. The price is that the ids at a boundary may differ from
// encoding the concatenated text (a SentencePiece model adds its "▁" word
// start to each piece; a BPE cannot merge across the boundary). Stanford
// Alpaca's own script masks by the length of the encoded prompt instead,
// which is off by one where a merge crosses the boundary. bos is left out
// when the tokenizer has none (bos_id() < 0); eos is always appended and is a
// label, so the model learns to stop.
//
// Note [Template text and special tokens]
// Template text (a chat role's prefix and suffix, from the job file) goes
// through Tokenizer::Encode, so "<|eot_id|>" in it becomes the one special id
// where the tokenizer has one (a Hugging Face tokenizer.json matches its
// added tokens in text, as Hugging Face does; the byte and SentencePiece
// tokenizers encode it as characters). A record's own text goes through
// EncodePlainText (Note [Special tokens in text] in tokenizer.h): a user's
// "<|eot_id|>" stays characters and can never forge a turn boundary.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/data/instruction_format.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

struct EncodedRecord {
  std::vector<int32_t> tokens;
  // 1 where tokens[i] is a label (trained on), 0 where it is not (-100).
  std::vector<uint8_t> loss_mask;
};

// Note [Template text and special tokens].
std::vector<int32_t> EncodeTemplateText(const Tokenizer& tokenizer, absl::string_view text);

// Note [Segments are tokenized apart]. Template segments are encoded with
// EncodeTemplateText, record text with Tokenizer::Encode.
EncodedRecord EncodeRecord(const Tokenizer& tokenizer, const std::vector<TextSegment>& segments);

}  // namespace dslaunch::runtime
