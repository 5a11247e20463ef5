// libFuzzer target: the first bytes of a .safetensors file
// (runtime/hf/safetensors_header.h). The header is trusted in nothing: every
// input is refused with an error, or yields entries whose byte ranges lie
// inside the file, in order, without overlap.
#include <cstddef>
#include <cstdint>

#include "runtime/hf/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int64_t available = static_cast<int64_t>(size);
  // As a whole file, and as the start of a larger one.
  for (int64_t file_size : {available, available + 4096}) {
    auto header = dslaunch::runtime::ParseSafetensorsHeader(data, available, file_size, "fuzz.safetensors");
    if (!header.ok()) continue;
    int64_t previous_end = 0;
    for (const auto& entry : header->entries) {
      if (entry.begin < previous_end || entry.end < entry.begin ||
          header->data_start + entry.end > file_size) {
        __builtin_trap();
      }
      previous_end = entry.end;
    }
  }
  return 0;
}
