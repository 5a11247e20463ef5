// Test support: a fresh folder per test for config files, and ds_configs
// loaded from it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"

namespace dslaunch::runtime {

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "config_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `text` to `name` (folders created) under the test's folder; returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    std::filesystem::path path = std::filesystem::path(dir_) / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path);
    out << text;
    return path.string();
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
