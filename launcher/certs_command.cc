#include "launcher/certs_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flag_table.h"
#include "common/tls_certificates.h"
#include "launcher/launcher_notice.h"
#include "launcher/subcommand_flags.h"

namespace dslaunch {

int RunCertsCommand(const std::vector<std::string>& args) {
  std::string out, hosts;
  int64_t days = 365;
  bool one_for_all = false;
  FlagTable flags("dslaunch certs", "dslaunch certs --out DIR --hosts HOST,HOST,... [--days N] [--one_for_all]");
  flags.String("--out", &out, "DIR", "where the CA and one folder per host go (made 0700; an existing CA signs)")
      .String("--hosts", &hosts, "LIST",
              "the hosts' names or addresses as controllers and ranks dial them (localhost and 127.0.0.1 are "
              "added to each)")
      .Int("--days", &days, "N", "how long the certificates are valid", {1, 36500})
      .Bool("--one_for_all", &one_for_all,
            "one certificate naming every host, in DIR/all-hosts, for a --tls_dir all hosts share (NFS)");
  if (EarlyExit early = ParseSubcommandFlags(flags, args, "certs", "")) return *early;
  CertificateRequest request;
  request.out_dir = out;
  request.hosts = absl::StrSplit(hosts, ',', absl::SkipWhitespace());
  request.days = static_cast<int>(days);
  request.one_for_all = one_for_all;
  if (absl::Status made = MakeClusterCertificates(request); !made.ok()) {
    Notice(absl::StrCat("certs: ", made.message()));
    return made.code() == absl::StatusCode::kInvalidArgument ? kUsageError : 1;
  }
  if (one_for_all) {
    std::printf("made %s/ca.crt and %s/%s, one TLS folder naming %s; pass it as --tls_dir to dsagent and dslaunch on "
                "every host; keep %s/ca.key off the hosts\n",
                out.c_str(), out.c_str(), kAllHostsFolder, absl::StrJoin(request.hosts, ", ").c_str(), out.c_str());
  } else {
    std::printf("made %s/ca.crt and a TLS folder for each of %s under %s; copy %s/HOST to that host and pass it as "
                "--tls_dir to dsagent and dslaunch there; keep %s/ca.key off the hosts\n",
                out.c_str(), absl::StrJoin(request.hosts, ", ").c_str(), out.c_str(), out.c_str(), out.c_str());
  }
  return 0;
}

}  // namespace dslaunch
