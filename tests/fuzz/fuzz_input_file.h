// For fuzz targets whose parser reads a path: the input written to a file of
// this process (one per process, rewritten for every input).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace dslaunch::fuzz {

// Writes `data` to $TMPDIR (else /tmp)/dslaunch-fuzz-<pid><suffix> and
// returns its path (scripts/fuzz.sh points TMPDIR into its scratch folder).
inline std::string WriteInputFile(const uint8_t* data, size_t size, const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/dslaunch-fuzz-" +
                           std::to_string(::getpid()) + suffix;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) __builtin_trap();
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) __builtin_trap();
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

}  // namespace dslaunch::fuzz
