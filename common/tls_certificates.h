// `dslaunch certs`: a certificate authority and one certificate per host for
// Note [Mutual TLS] (common/tls_files.h), made with OpenSSL, for a quick
// start. A site with its own PKI (cert-manager, Vault, an enterprise CA)
// puts its files in the same layout instead.
//
// Layout under OUT:
//   OUT/ca.crt, OUT/ca.key (0600)        the CA; keep ca.key off the hosts
//   OUT/<host>/ca.crt, tls.crt, tls.key  one folder per host: copy it to
//                                        that host and pass it as --tls_dir
// Keys are ECDSA P-256; certificates SHA-256, valid from a minute ago for
// `days` days. A host certificate is for server and client use and names the
// host (a DNS name, or an IP address when it parses as one) plus localhost,
// 127.0.0.1 and ::1. When OUT already holds ca.crt and ca.key, that CA signs
// the new hosts (adding hosts later); an existing host folder is refused,
// never overwritten.
//
// With `one_for_all`, one certificate names every host instead, in
// OUT/all-hosts/: for a folder that every host shares (an NFS home), where
// `--tls_dir` is one path for all of them. Every host then holds the same key.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dslaunch {

struct CertificateRequest {
  std::string out_dir;
  std::vector<std::string> hosts;
  int days = 365;
  bool one_for_all = false;
};

// The folder `one_for_all` writes, under out_dir.
inline constexpr char kAllHostsFolder[] = "all-hosts";

absl::Status MakeClusterCertificates(const CertificateRequest& request);

}  // namespace dslaunch
