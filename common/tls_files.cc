#include "common/tls_files.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bounded_file.h"
#include "common/rank_contract.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

// A certificate chain or key is a few KiB; a CA bundle a few hundred.
constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& dir, const char* name, const std::string& flag,
                                    bool secret) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string what = absl::StrCat(flag, " ", dir, ": ", name);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat(what, " (", path, ")"));
  if (secret && S_ISREG(st.st_mode) && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    return absl::PermissionDeniedError(absl::StrCat(what, " is accessible by other users (mode ",
                                                    absl::StrFormat("%04o", st.st_mode & 0777),
                                                    "); it is a private key: run chmod 600 ", path));
  }
  absl::StatusOr<std::string> content = ReadConfigFile(path, what, kMaxPemBytes);
  if (!content.ok()) return content.status();
  if (!absl::StrContains(*content, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (", path, ") is not a PEM file (no -----BEGIN line)"));
  }
  return content;
}

}  // namespace

absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& given, const std::string& flag) {
  char* resolved = ::realpath(given.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoStatus(absl::StrCat(flag, " ", given));
  TlsFiles tls;
  tls.dir = resolved;
  std::free(resolved);
  const std::string& dir = tls.dir;
  auto ca = ReadPem(dir, kTlsCaFile, flag, /*secret=*/false);
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem(dir, kTlsCertFile, flag, /*secret=*/false);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(dir, kTlsKeyFile, flag, /*secret=*/true);
  if (!key.ok()) return key.status();
  tls.ca_pem = std::move(*ca);
  tls.cert_pem = std::move(*cert);
  tls.key_pem = std::move(*key);
  return tls;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsFiles* tls) {
  if (tls == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls->ca_pem;
  options.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsFiles* tls) {
  if (tls == nullptr) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca_pem;
  options.pem_private_key = tls->key_pem;
  options.pem_cert_chain = tls->cert_pem;
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RankChannelCredentials(const std::string& tls_dir) {
  if (tls_dir.empty()) return ChannelCredentialsFor(nullptr);
  auto tls = ReadTlsDir(tls_dir, rank_env::kTlsDir);
  if (!tls.ok()) return tls.status();
  return ChannelCredentialsFor(&*tls);
}

}  // namespace dslaunch
