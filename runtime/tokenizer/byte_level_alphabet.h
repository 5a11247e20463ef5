// GPT-2's byte-level alphabet, which Hugging Face's ByteLevel pre-tokenizer
// and decoder use: every byte 0..255 stands for one printable Unicode
// character, so that a BPE vocabulary of strings covers every byte sequence.
// Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) stand
// for U+0100, U+0101, ... in byte order (space is U+0120 'Ġ', '\n' U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

// The code point byte `b` stands for.
uint32_t ByteLevelCodePoint(uint8_t b);

// Each byte of `bytes` replaced by the UTF-8 of its character.
std::string BytesToByteLevel(absl::string_view bytes);

// The byte a code point stands for, or nullopt for a code point outside the
// alphabet.
std::optional<uint8_t> ByteLevelByte(uint32_t code_point);

}  // namespace dslaunch::runtime
