// The few file-system operations checkpoints need, on plain POSIX calls.
//
// Why not std::filesystem: the LibTorch 2.x wheels export some
// std::filesystem symbols of their own; a program linked with them saw
// std::filesystem::remove_all jump to address 0 (seen on the H200 host with
// LibTorch 2.11). Code that links LibTorch uses these instead.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dslaunch::runtime::posix_fs {

bool Exists(const std::string& path);
bool IsDirectory(const std::string& path);
// mkdir -p. Errors name the path.
absl::Status MakeDirectories(const std::string& path);
// rm -rf; a missing path is not an error.
absl::Status RemoveTree(const std::string& path);
absl::Status Rename(const std::string& from, const std::string& to);
// Names of the entries of a folder (not . and ..); empty when unreadable.
std::vector<std::string> ListDirectory(const std::string& path);
// Modification time in nanoseconds; 0 when the path does not exist.
int64_t ModificationTimeNs(const std::string& path);

}  // namespace dslaunch::runtime::posix_fs
