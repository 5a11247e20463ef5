// Test support: a fresh folder under $TEST_TMPDIR (or /tmp), removed with
// everything in it when the object goes. Header-only.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "runtime/fs/file_system.h"

namespace dslaunch::runtime::testing {

class TempFolder {
 public:
  explicit TempFolder(const std::string& prefix = "dstest") {
    const char* root = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(root != nullptr ? root : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempFolder() {
    if (!path_.empty()) (void)FileSystem::Default().RemoveTree(path_);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  // Empty when the folder could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dslaunch::runtime::testing
