// For tests: a fresh directory, removed with its contents when destroyed.
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <fstream>
#include <string>

namespace dslaunch {

class TestTempDir {
 public:
  TestTempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/dsdata-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  // Not std::filesystem::remove_all: test binaries that link LibTorch 2.x
  // saw it jump to address 0 (runtime/fs/file_system.h says why).
  ~TestTempDir() {
    if (path_.empty()) return;
    // Depth first, links not followed; what cannot be removed stays (best effort, as before).
    auto remove_entry = [](const char* entry, const struct stat*, int, struct FTW*) {
      (void)::remove(entry);
      return 0;
    };
    ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

  // Writes `contents` to File(name) and returns its path.
  std::string Write(const std::string& name, const std::string& contents) const {
    std::ofstream out(File(name), std::ios::binary);
    out << contents;
    return File(name);
  }

 private:
  std::string path_;
};

}  // namespace dslaunch
