// Note [Mutual TLS]: the TLS folder's checks, `dslaunch certs`' files, and
// what a TLS server takes: only clients with a certificate its CA signed,
// dialling a name the server's certificate carries.
#include "common/tls_files.h"

#include <sys/stat.h>

#include <grpcpp/create_channel.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <fstream>
#include <sstream>

#include "common/generic_unary_call.h"
#include "common/rank_contract.h"
#include "common/test_temp_dir.h"
#include "common/tls_certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/store.grpc.pb.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int ModeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

CertificateRequest Request(const std::string& out, std::vector<std::string> hosts) {
  CertificateRequest request;
  request.out_dir = out;
  request.hosts = std::move(hosts);
  request.days = 2;
  return request;
}

// A server on `host`:0 with the Store service's generated base, whose
// methods are all unimplemented: a call that passes the TLS handshake gets
// UNIMPLEMENTED, one that fails it UNAVAILABLE.
class TlsServer {
 public:
  TlsServer(const std::string& host, const TlsFiles* tls) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    builder.AddListeningPort(host + ":0", ServerCredentialsFor(tls), &port_);
    server_ = builder.BuildAndStart();
    address_ = host + ":" + std::to_string(port_);
  }
  ~TlsServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  grpc::StatusCode Call(const TlsFiles* tls, const std::string& dial = "") const {
    auto channel = grpc::CreateChannel(dial.empty() ? address_ : dial + ":" + std::to_string(port_),
                                       ChannelCredentialsFor(tls));
    return GenericUnaryCall(channel, "/dslaunch.Store/Get", "").error_code();
  }

 private:
  Store::Service service_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

TEST(TlsDir, ErrorsNameTheFile) {
  TestTempDir dir;
  auto missing = ReadTlsDir(dir.File("nowhere"), "--tls_dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--tls_dir"));
  ASSERT_TRUE(MakeClusterCertificates(Request(dir.File("certs"), {"node-a"})).ok());
  const std::string host = dir.File("certs/node-a");
  ASSERT_TRUE(ReadTlsDir(host, "--tls_dir").ok());

  ::chmod((host + "/tls.key").c_str(), 0644);
  auto open_key = ReadTlsDir(host, "--tls_dir");
  ASSERT_FALSE(open_key.ok());
  EXPECT_THAT(open_key.status().message(), HasSubstr("tls.key is accessible by other users (mode 0644)"));
  ::chmod((host + "/tls.key").c_str(), 0600);

  const std::string ca = Slurp(host + "/ca.crt");
  std::ofstream(host + "/ca.crt", std::ios::trunc) << "not a certificate\n";
  auto not_pem = ReadTlsDir(host, "DSLAUNCH_TLS_DIR");
  ASSERT_FALSE(not_pem.ok());
  EXPECT_THAT(not_pem.status().message(), HasSubstr("DSLAUNCH_TLS_DIR"));
  EXPECT_THAT(not_pem.status().message(), HasSubstr("ca.crt"));
  EXPECT_THAT(not_pem.status().message(), HasSubstr("is not a PEM file"));

  std::ofstream(host + "/ca.crt", std::ios::trunc) << ca;
  ::unlink((host + "/tls.crt").c_str());
  auto no_cert = ReadTlsDir(host, "--tls_dir");
  ASSERT_FALSE(no_cert.ok());
  EXPECT_THAT(no_cert.status().message(), HasSubstr("tls.crt"));

  auto rank = RankChannelCredentials(host);
  ASSERT_FALSE(rank.ok());
  EXPECT_THAT(rank.status().message(), HasSubstr(rank_env::kTlsDir));
  EXPECT_TRUE(RankChannelCredentials("").ok());  // no folder: plaintext
}

TEST(TlsCertificates, MakesACaAndAFolderPerHostAndNeverOverwrites) {
  TestTempDir dir;
  const std::string out = dir.File("certs");
  ASSERT_TRUE(MakeClusterCertificates(Request(out, {"node-a", "10.1.2.3"})).ok());
  EXPECT_EQ(ModeOf(out), 0700);
  EXPECT_EQ(ModeOf(out + "/ca.key"), 0600);
  for (const std::string host : {"node-a", "10.1.2.3"}) {
    EXPECT_EQ(ModeOf(out + "/" + host + "/tls.key"), 0600) << host;
    EXPECT_EQ(Slurp(out + "/" + host + "/ca.crt"), Slurp(out + "/ca.crt")) << host;
    EXPECT_TRUE(ReadTlsDir(out + "/" + host, "--tls_dir").ok()) << host;
  }
  const std::string ca = Slurp(out + "/ca.crt");
  const std::string cert = Slurp(out + "/node-a/tls.crt");
  auto again = MakeClusterCertificates(Request(out, {"node-b", "node-a"}));
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.message(), HasSubstr("node-a exists"));
  EXPECT_EQ(Slurp(out + "/node-a/tls.crt"), cert);
  EXPECT_EQ(ModeOf(out + "/node-b"), -1);  // refused before anything was made
  // A later host is signed by the same CA.
  ASSERT_TRUE(MakeClusterCertificates(Request(out, {"node-b"})).ok());
  EXPECT_EQ(Slurp(out + "/ca.crt"), ca);
  EXPECT_EQ(Slurp(out + "/node-b/ca.crt"), ca);

  for (const std::string bad : {"a/b", "..", ""}) {
    EXPECT_FALSE(MakeClusterCertificates(Request(dir.File("other"), {bad})).ok()) << bad;
  }
  EXPECT_FALSE(MakeClusterCertificates(Request(dir.File("other"), {})).ok());

  // One certificate for every host, signed by the same CA, never remade.
  CertificateRequest shared = Request(out, {"node-c", "10.1.2.4"});
  shared.one_for_all = true;
  ASSERT_TRUE(MakeClusterCertificates(shared).ok());
  EXPECT_EQ(Slurp(out + "/all-hosts/ca.crt"), ca);
  EXPECT_TRUE(ReadTlsDir(out + "/all-hosts", "--tls_dir").ok());
  EXPECT_EQ(ModeOf(out + "/node-c"), -1);
  const std::string shared_cert = Slurp(out + "/all-hosts/tls.crt");
  EXPECT_FALSE(MakeClusterCertificates(shared).ok());
  EXPECT_EQ(Slurp(out + "/all-hosts/tls.crt"), shared_cert);
}

TEST(MutualTls, OnlyClientsWithTheClustersCertificateGetThrough) {
  TestTempDir dir;
  ASSERT_TRUE(MakeClusterCertificates(Request(dir.File("cluster"), {"node-a", "node-b"})).ok());
  ASSERT_TRUE(MakeClusterCertificates(Request(dir.File("stranger"), {"node-a"})).ok());
  auto server_files = ReadTlsDir(dir.File("cluster/node-a"), "--tls_dir");
  auto client_files = ReadTlsDir(dir.File("cluster/node-b"), "--tls_dir");
  auto stranger = ReadTlsDir(dir.File("stranger/node-a"), "--tls_dir");
  ASSERT_TRUE(server_files.ok() && client_files.ok() && stranger.ok());

  TlsServer server("127.0.0.1", &*server_files);
  ASSERT_TRUE(server.ok());
  // Another host of the cluster: the handshake passes, the call reaches gRPC.
  EXPECT_EQ(server.Call(&*client_files), grpc::StatusCode::UNIMPLEMENTED);
  // Plaintext: refused at the handshake.
  EXPECT_EQ(server.Call(nullptr), grpc::StatusCode::UNAVAILABLE);
  // A certificate of another CA: the server refuses it, and the client the server's.
  EXPECT_EQ(server.Call(&*stranger), grpc::StatusCode::UNAVAILABLE);
  // The right CA but no certificate of its own: mutual TLS requires one.
  TlsFiles no_client_cert = *client_files;
  no_client_cert.cert_pem.clear();
  no_client_cert.key_pem.clear();
  EXPECT_EQ(server.Call(&no_client_cert), grpc::StatusCode::UNAVAILABLE);

  // A server whose certificate does not name the address it is dialled at.
  TlsServer elsewhere("127.0.0.2", &*server_files);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere.Call(&*client_files), grpc::StatusCode::UNAVAILABLE);

  // A plaintext server does not talk to a TLS client either.
  TlsServer plain("127.0.0.1", nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.Call(&*client_files), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(plain.Call(nullptr), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace dslaunch
