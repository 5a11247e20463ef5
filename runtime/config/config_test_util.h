// Test support: a fresh folder per test for config files, and ds_configs
// loaded from it.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = JoinPath(::testing::TempDir(), "config_test_XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  // Not std::filesystem: fs/file_system.h says why.
  void TearDown() override { EXPECT_TRUE(FileSystem::Default().RemoveTree(dir_).ok()); }

  // Writes `text` to `name` (folders created) under the test's folder; returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = JoinPath(dir_, name);
    EXPECT_TRUE(FileSystem::Default().CreateDirectories(ParentDirectory(path)).ok()) << path;
    std::ofstream out(path);
    out << text;
    return path;
  }

  std::string dir_;
};

// A ds_config written to the test's folder and loaded (path_: where).
class DsConfigTest : public ConfigFileTest {
 protected:
  absl::StatusOr<DsConfig> Load(const std::string& name, const std::string& text,
                                std::vector<ConfigOverride> overrides = {}, int world_size = 1) {
    path_ = Write(name, text);
    return LoadDsConfig(path_, overrides, WorldShape{world_size});
  }
  std::string path_;
};

// The lines of a failed load's message ("" lines dropped).
template <typename T>
std::vector<std::string> ProblemLines(const absl::StatusOr<T>& result) {
  if (result.ok()) return {};
  return absl::StrSplit(std::string(result.status().message()), '\n', absl::SkipEmpty());
}

}  // namespace dslaunch::runtime
