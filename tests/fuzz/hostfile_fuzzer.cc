// libFuzzer target: DeepSpeed-style hostfile text (launcher/hostfile.h).
// Every input either parses into hosts with positive slot counts within the
// bounds, or is an error naming the file; nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/hostfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = dslaunch::ParseHostfile(text, "fuzz-hostfile");
  if (!parsed.ok()) {
    if (parsed.status().message().find("fuzz-hostfile") == std::string_view::npos) __builtin_trap();
    return 0;
  }
  return 0;
}
