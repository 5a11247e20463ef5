#include "launcher/sibling_binary.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace dslaunch {

std::string BinaryBesideThisOne(const std::string& name) {
  std::error_code error;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string dir = error ? "." : exe.parent_path().string();
  const std::string beside = dir + "/" + name;
  return ::access(beside.c_str(), X_OK) == 0 ? beside : name;
}

}  // namespace dslaunch
