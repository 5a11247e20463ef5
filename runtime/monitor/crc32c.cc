#include "runtime/monitor/crc32c.h"

#include <array>

namespace dslaunch::runtime {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  // One byte at a time: event records are a few hundred bytes per step.
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) crc = kTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace dslaunch::runtime
