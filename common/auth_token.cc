#include "common/auth_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

// A token file holds one line of a few dozen characters.
constexpr size_t kMaxTokenFileBytes = 4096;

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("token file ", path));
  // Not a regular file (a device is 0666): ReadConfigFile names the type.
  if (S_ISREG(st.st_mode) && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token file ", path, " is accessible by other users (mode ",
        absl::StrFormat("%04o", st.st_mode & 0777), "); run: chmod 600 ", path));
  }
  // Note [Bounded input files]: a token is one short line.
  absl::StatusOr<std::string> content = ReadConfigFile(path, "token file", kMaxTokenFileBytes);
  if (!content.ok()) return content.status();
  std::string line = content->substr(0, content->find('\n'));
  if (absl::StripAsciiWhitespace(line).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  std::string token(absl::StripAsciiWhitespace(line));
  if (absl::Status strong = CheckTokenStrength(token); !strong.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", strong.message()));
  }
  return token;
}

double TokenEntropyBits(absl::string_view token) {
  if (token.empty()) return 0;
  int counts[256] = {0};
  for (unsigned char c : token) ++counts[c];
  double per_character = 0;
  for (int count : counts) {
    if (count == 0) continue;
    const double p = static_cast<double>(count) / static_cast<double>(token.size());
    per_character -= p * std::log2(p);
  }
  return per_character * static_cast<double>(token.size());
}

absl::Status CheckTokenStrength(absl::string_view token) {
  constexpr absl::string_view kHowTo =
      "make one with: openssl rand -hex 32 > TOKEN_FILE && chmod 600 TOKEN_FILE (or head -c 32 /dev/urandom | "
      "od -An -tx1 | tr -d ' \\n')";
  if (token.size() < kMinTokenCharacters) {
    return absl::InvalidArgumentError(absl::StrCat("the token has ", token.size(), " characters; at least ",
                                                   kMinTokenCharacters, " are needed (it is a password); ", kHowTo));
  }
  const double bits = TokenEntropyBits(token);
  if (bits < kMinTokenEntropyBits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the token is too predictable: its characters carry about %.0f bits, at least %.0f are needed (a repeated "
        "or patterned string is guessable); %s",
        bits, kMinTokenEntropyBits, kHowTo));
  }
  return absl::OkStatus();
}

absl::Status WriteTokenFile(const std::string& path, absl::string_view token) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create token file ", path));
  std::string content = absl::StrCat(token, "\n");
  ssize_t written = ::write(fd, content.data(), content.size());
  int err = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(content.size())) {
    return ErrnoStatus(absl::StrCat("write token file ", path), err);
  }
  return absl::OkStatus();
}

std::string GenerateToken() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.empty() || b.empty()) return false;  // an empty token never authenticates
  // Touch every byte of the longer string whatever the inputs: no early exit
  // that would leak how much of a guess was right.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t length = std::max(a.size(), b.size());
  for (size_t i = 0; i < length; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool CallHasToken(const grpc::ServerContextBase& context, absl::string_view expected) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it == metadata.end()) return false;
  return TokensEqual(absl::string_view(it->second.data(), it->second.size()), expected);
}

std::string CallJobToken(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kJobTokenMetadataKey);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace dslaunch
