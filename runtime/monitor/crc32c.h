// CRC-32C (Castagnoli), the checksum of TFRecord framing (TensorBoard event
// files), and TFRecord's masked form of it.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

// CRC-32C of `data` (reflected polynomial 0x82F63B78, initial and final
// value 0xFFFFFFFF): Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(absl::string_view data);

// TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC
// of data that itself holds CRCs does not degenerate.
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace dslaunch::runtime
