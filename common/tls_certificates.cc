#include "common/tls_certificates.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;

// The newest OpenSSL error, for messages.
std::string OpenSslError(const char* what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return absl::StrCat("OpenSSL: ", what, ": ", text);
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return ::inet_pton(AF_INET, host.c_str(), buffer) == 1 || ::inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str()));
  if (!extension || X509_add_ext(cert, extension.get(), -1) != 1) {
    return absl::InternalError(OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid), " = ", value).c_str()));
  }
  return absl::OkStatus();
}

absl::Status SetName(X509_NAME* name, const std::string& common_name) {
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("dslaunch"), -1,
                                 -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0) != 1) {
    return absl::InvalidArgumentError(OpenSslError(absl::StrCat("subject name ", common_name).c_str()));
  }
  return absl::OkStatus();
}

// A certificate for `key`, signed by `issuer_key` (`issuer` null: self-signed).
absl::StatusOr<Owned<X509>> MakeCertificate(EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
                                            const std::string& common_name, int days,
                                            const std::vector<std::pair<int, std::string>>& extensions) {
  Owned<X509> cert(X509_new());
  if (!cert) return absl::InternalError(OpenSslError("X509_new"));
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return absl::InternalError(OpenSslError("RAND_bytes"));
  serial[0] &= 0x7f;  // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  if (number == nullptr || BN_to_ASN1_INTEGER(number, X509_get_serialNumber(cert.get())) == nullptr) {
    BN_free(number);
    return absl::InternalError(OpenSslError("serial number"));
  }
  BN_free(number);
  // A minute back: clocks of a cluster differ by a little.
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 24 * 3600);
  if (X509_set_pubkey(cert.get(), key) != 1) return absl::InternalError(OpenSslError("X509_set_pubkey"));
  if (absl::Status named = SetName(X509_get_subject_name(cert.get()), common_name); !named.ok()) return named;
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1) {
    return absl::InternalError(OpenSslError("X509_set_issuer_name"));
  }
  for (const auto& [nid, value] : extensions) {
    if (absl::Status added = AddExtension(cert.get(), signer, nid, value); !added.ok()) return added;
  }
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return absl::InternalError(OpenSslError("X509_sign"));
  }
  return cert;
}

absl::StatusOr<Owned<EVP_PKEY>> MakeKey() {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return absl::InternalError(OpenSslError("EVP_EC_gen P-256"));
  return key;
}

template <class Write>
absl::StatusOr<std::string> Pem(Write write, const char* what) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return absl::InternalError(OpenSslError(what));
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> CertificatePem(X509* cert) {
  return Pem([cert](BIO* bio) { return PEM_write_bio_X509(bio, cert); }, "PEM_write_bio_X509");
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  return Pem([key](BIO* bio) { return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr); },
             "PEM_write_bio_PrivateKey");
}

// Writes `content` to a new file `path` with `mode`; an existing file is an error.
absl::Status WriteNewFile(const std::string& path, const std::string& content, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create ", path));
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status failed = ErrnoStatus(absl::StrCat("write ", path));
      ::close(fd);
      return failed;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return ErrnoStatus(absl::StrCat("write ", path));
  return absl::OkStatus();
}

absl::Status MakeDirectory(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return ErrnoStatus(absl::StrCat("mkdir ", path));
  return absl::OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The CA of OUT: read when ca.crt and ca.key exist there, else made and written.
absl::Status LoadOrMakeCa(const std::string& out, int days, Owned<X509>* ca, Owned<EVP_PKEY>* ca_key) {
  const std::string cert_path = out + "/ca.crt";
  const std::string key_path = out + "/ca.key";
  if (Exists(cert_path) || Exists(key_path)) {
    if (!Exists(cert_path) || !Exists(key_path)) {
      return absl::FailedPreconditionError(absl::StrCat(out, " holds only one of ca.crt and ca.key; move it away "
                                                        "or restore the other"));
    }
    auto cert_text = ReadConfigFile(cert_path, "CA certificate", 1 << 20);
    if (!cert_text.ok()) return cert_text.status();
    auto key_text = ReadConfigFile(key_path, "CA key", 1 << 20);
    if (!key_text.ok()) return key_text.status();
    Owned<BIO> cert_bio(BIO_new_mem_buf(cert_text->data(), static_cast<int>(cert_text->size())));
    Owned<BIO> key_bio(BIO_new_mem_buf(key_text->data(), static_cast<int>(key_text->size())));
    ca->reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (!*ca) return absl::InvalidArgumentError(OpenSslError(cert_path.c_str()));
    ca_key->reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
    if (!*ca_key) return absl::InvalidArgumentError(OpenSslError(key_path.c_str()));
    if (X509_check_private_key(ca->get(), ca_key->get()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(key_path, " is not the key of ", cert_path));
    }
    return absl::OkStatus();
  }
  auto key = MakeKey();
  if (!key.ok()) return key.status();
  auto cert = MakeCertificate(key->get(), nullptr, nullptr, "dslaunch cluster CA", days,
                              {{NID_basic_constraints, "critical,CA:TRUE"},
                               {NID_key_usage, "critical,keyCertSign,cRLSign"},
                               {NID_subject_key_identifier, "hash"}});
  if (!cert.ok()) return cert.status();
  auto cert_pem = CertificatePem(cert->get());
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = KeyPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  if (absl::Status written = WriteNewFile(key_path, *key_pem, 0600); !written.ok()) return written;
  if (absl::Status written = WriteNewFile(cert_path, *cert_pem, 0644); !written.ok()) return written;
  *ca = std::move(*cert);
  *ca_key = std::move(*key);
  return absl::OkStatus();
}

}  // namespace

absl::Status MakeClusterCertificates(const CertificateRequest& request) {
  if (request.out_dir.empty()) return absl::InvalidArgumentError("--out: a folder is required");
  if (request.hosts.empty()) return absl::InvalidArgumentError("--hosts: name at least one host");
  if (request.days < 1 || request.days > 36500) {
    return absl::InvalidArgumentError(absl::StrCat("--days ", request.days, ": between 1 and 36500"));
  }
  for (const std::string& host : request.hosts) {
    if (host.empty() || host == "." || host == ".." || host.find('/') != std::string::npos ||
        host.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--hosts: '", host, "' is not a host name or address"));
    }
    if (!request.one_for_all && Exists(absl::StrCat(request.out_dir, "/", host))) {
      return absl::AlreadyExistsError(absl::StrCat(request.out_dir, "/", host,
                                                   " exists: a host's certificate is never overwritten; remove the "
                                                   "folder to make a new one"));
    }
  }
  if (request.one_for_all && Exists(absl::StrCat(request.out_dir, "/", kAllHostsFolder))) {
    return absl::AlreadyExistsError(absl::StrCat(request.out_dir, "/", kAllHostsFolder,
                                                 " exists: a certificate is never overwritten; remove the folder to "
                                                 "make a new one"));
  }
  if (!Exists(request.out_dir)) {
    if (absl::Status made = MakeDirectory(request.out_dir, 0700); !made.ok()) return made;
  }
  Owned<X509> ca;
  Owned<EVP_PKEY> ca_key;
  if (absl::Status loaded = LoadOrMakeCa(request.out_dir, request.days, &ca, &ca_key); !loaded.ok()) return loaded;
  auto ca_pem = CertificatePem(ca.get());
  if (!ca_pem.ok()) return ca_pem.status();
  // Each folder: its name and the hosts its certificate names.
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;
  if (request.one_for_all) {
    folders.push_back({kAllHostsFolder, request.hosts});
  } else {
    for (const std::string& host : request.hosts) folders.push_back({host, {host}});
  }
  for (const auto& [folder, named] : folders) {
    auto key = MakeKey();
    if (!key.ok()) return key.status();
    std::vector<std::string> entries;
    for (const std::string& host : named) entries.push_back(absl::StrCat(IsIpAddress(host) ? "IP:" : "DNS:", host));
    for (const char* local : {"DNS:localhost", "IP:127.0.0.1", "IP:::1"}) {
      if (std::find(entries.begin(), entries.end(), local) == entries.end()) entries.push_back(local);
    }
    const std::string names = absl::StrJoin(entries, ",");
    const std::string& host = folder;
    auto cert = MakeCertificate(key->get(), ca.get(), ca_key.get(), named.front(), request.days,
                                {{NID_basic_constraints, "critical,CA:FALSE"},
                                 {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                                 {NID_ext_key_usage, "serverAuth,clientAuth"},
                                 {NID_subject_alt_name, names},
                                 {NID_authority_key_identifier, "keyid:always"}});
    if (!cert.ok()) return cert.status();
    auto cert_pem = CertificatePem(cert->get());
    if (!cert_pem.ok()) return cert_pem.status();
    auto key_pem = KeyPem(key->get());
    if (!key_pem.ok()) return key_pem.status();
    const std::string dir = absl::StrCat(request.out_dir, "/", host);
    if (absl::Status made = MakeDirectory(dir, 0700); !made.ok()) return made;
    if (absl::Status w = WriteNewFile(dir + "/tls.key", *key_pem, 0600); !w.ok()) return w;
    if (absl::Status w = WriteNewFile(dir + "/tls.crt", *cert_pem, 0644); !w.ok()) return w;
    if (absl::Status w = WriteNewFile(dir + "/ca.crt", *ca_pem, 0644); !w.ok()) return w;
  }
  return absl::OkStatus();
}

}  // namespace dslaunch
