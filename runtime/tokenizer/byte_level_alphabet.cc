#include "runtime/tokenizer/byte_level_alphabet.h"

#include <array>

#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

bool StandsForItself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<uint32_t, 256> code_point;
  std::array<std::string, 256> utf8;
  Alphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = StandsForItself(b) ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(code_point[b], &utf8[b]);
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

uint32_t ByteLevelCodePoint(uint8_t b) { return TheAlphabet().code_point[b]; }

std::string BytesToByteLevel(absl::string_view bytes) {
  const Alphabet& alphabet = TheAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += alphabet.utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<uint8_t> ByteLevelByte(uint32_t code_point) {
  if (code_point < 256 && StandsForItself(static_cast<int>(code_point))) return static_cast<uint8_t>(code_point);
  if (code_point < 256 || code_point >= 256 + 68) return std::nullopt;
  // The n-th byte that does not stand for itself maps to 256 + n.
  uint32_t n = code_point - 256;
  for (int b = 0; b < 256; ++b) {
    if (!StandsForItself(b) && n-- == 0) return static_cast<uint8_t>(b);
  }
  return std::nullopt;
}

}  // namespace dslaunch::runtime
