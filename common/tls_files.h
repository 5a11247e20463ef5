// Mutual TLS for every gRPC connection of the control plane: controller,
// agents, the store, ranks, `dslaunch status`.
//
// Note [Mutual TLS]
// `--tls_dir DIR` (dslaunch, dsagent, dslaunch status) names a folder with
// three PEM files, the layout of a Kubernetes TLS secret mounted as a volume:
//   ca.crt   the cluster's certificate authority; every peer is checked
//            against it, and only it (not the system's roots)
//   tls.crt  this host's certificate, signed by that CA, for server and
//            client use; its names must include every name or address the
//            host is dialled at (`dslaunch certs` adds localhost, 127.0.0.1
//            and ::1 to each)
//   tls.key  its private key; refused when other users can read it
// With it, every server (dsagent, the store and its Controller service)
// takes TLS connections only and requires a client certificate signed by the
// CA; every client presents tls.crt and checks the server's certificate and
// name. A plaintext client gets nothing but a failed handshake. Ranks get the
// folder from their agent (DSLAUNCH_TLS_DIR, Note [Rank environment
// contract]) and use it for the store and heartbeats. Tokens stay a second
// factor: a certificate lets a host talk, the tokens say what it may do.
// Without --tls_dir the transport is plaintext, as before.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace dslaunch {

inline constexpr char kTlsCaFile[] = "ca.crt";
inline constexpr char kTlsCertFile[] = "tls.crt";
inline constexpr char kTlsKeyFile[] = "tls.key";

struct TlsFiles {
  std::string dir;          // where they were read from, as an absolute path
  std::string ca_pem;       // ca.crt
  std::string cert_pem;     // tls.crt
  std::string key_pem;      // tls.key
};

// Reads DIR/ca.crt, DIR/tls.crt, DIR/tls.key. Errors name the file: missing,
// not PEM (no "-----BEGIN"), too large, or a key other users can read.
// `flag` names where DIR came from in messages ("--tls_dir", "DSLAUNCH_TLS_DIR").
absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir, const std::string& flag);

// Server credentials: TLS requiring a client certificate the CA signed when
// `tls` is set; plaintext when it is null.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsFiles* tls);

// Channel credentials: TLS with this host's certificate, trusting the CA
// only, when `tls` is set; plaintext when it is null.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsFiles* tls);

// A rank's channel credentials from its contract's DSLAUNCH_TLS_DIR (empty:
// plaintext). Errors name the variable and the file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RankChannelCredentials(const std::string& tls_dir);

}  // namespace dslaunch
