#include "agent/run_as_user.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dslaunch {

absl::StatusOr<RunAsUser> ResolveRunAsUser(const std::string& user) {
  if (user.empty()) return absl::InvalidArgumentError("--run_as: name a user");
  std::vector<char> buffer(1 << 16);
  struct passwd entry;
  struct passwd* found = nullptr;
  int error = ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
  uint32_t uid = 0;
  if (found == nullptr && error == 0 && absl::SimpleAtoi(user, &uid)) {
    error = ::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found);
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("--run_as ", user, ": no such user on this host",
                                            error != 0 ? absl::StrCat(" (", std::strerror(error), ")") : ""));
  }
  RunAsUser resolved;
  resolved.name = found->pw_name;
  resolved.uid = found->pw_uid;
  resolved.gid = found->pw_gid;
  resolved.home = found->pw_dir != nullptr ? found->pw_dir : "/";
  int count = 64;
  std::vector<gid_t> groups(count);
  while (::getgrouplist(resolved.name.c_str(), found->pw_gid, groups.data(), &count) < 0) {
    if (count <= static_cast<int>(groups.size())) count = static_cast<int>(groups.size()) * 2;
    if (count > 65536) return absl::ResourceExhaustedError(absl::StrCat("--run_as ", user, ": too many groups"));
    groups.resize(count);
  }
  resolved.groups.assign(groups.begin(), groups.begin() + count);
  return resolved;
}

absl::Status CheckCanRunAs(const RunAsUser& user) {
  const uid_t self = ::geteuid();
  if (self == 0 || self == static_cast<uid_t>(user.uid)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("--run_as ", user.name, ": dsagent runs as uid ", self,
                                                  " and cannot start ranks as uid ", user.uid,
                                                  "; run dsagent as root (the agent's own user cannot change "
                                                  "identity)"));
}

const RunAsUser* AllowedRunAsUser(const std::vector<RunAsUser>& allowed, const std::string& asked) {
  for (const RunAsUser& user : allowed) {
    if (asked == user.name || asked == absl::StrCat(user.uid)) return &user;
  }
  return nullptr;
}

}  // namespace dslaunch
