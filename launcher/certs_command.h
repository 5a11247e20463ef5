// `dslaunch certs --out DIR --hosts H1,H2,...`: a CA and one TLS folder per
// host for Note [Mutual TLS] (common/tls_certificates.h has the layout).
#pragma once

#include <string>
#include <vector>

namespace dslaunch {

int RunCertsCommand(const std::vector<std::string>& args);

}  // namespace dslaunch
