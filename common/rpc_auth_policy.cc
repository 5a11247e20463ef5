#include "common/rpc_auth_policy.h"

#include "absl/strings/str_cat.h"

namespace dslaunch {

const char* RpcCredentialName(RpcCredential credential) {
  switch (credential) {
    case RpcCredential::kNone: return "none";
    case RpcCredential::kAgentToken: return "agent token";
    case RpcCredential::kRankToken: return "rank token";
    case RpcCredential::kStoreToken: return "store token";
    case RpcCredential::kControllerToken: return "controller token";
    case RpcCredential::kAgentAndJobToken: return "agent token and job credential";
  }
  return "unknown";
}

const RpcCredential* RpcAuthPolicy::Find(const std::string& full_method) const {
  auto it = methods.find(full_method);
  return it == methods.end() ? nullptr : &it->second;
}

std::vector<std::string> RpcAuthPolicy::Unlisted(
    const google::protobuf::ServiceDescriptor& service) const {
  std::vector<std::string> unlisted;
  for (int i = 0; i < service.method_count(); ++i) {
    std::string full = absl::StrCat("/", service.full_name(), "/", service.method(i)->name());
    if (Find(full) == nullptr) unlisted.push_back(std::move(full));
  }
  return unlisted;
}

// Note [One authentication gate]: adding an RPC means adding its line here.
RpcAuthPolicy AgentAuthPolicy() {
  return RpcAuthPolicy{
      "dsagent",
      {
          {"/dslaunch.Agent/Describe", RpcCredential::kAgentToken},
          {"/dslaunch.Agent/ReservePort", RpcCredential::kAgentToken},
          // Note [Per-job credentials]: about one job, so that job's too.
          {"/dslaunch.Agent/StartRanks", RpcCredential::kAgentAndJobToken},
          {"/dslaunch.Agent/StopJob", RpcCredential::kAgentAndJobToken},
          {"/dslaunch.Agent/KeepAlive", RpcCredential::kAgentAndJobToken},
          {"/dslaunch.Agent/Watch", RpcCredential::kAgentAndJobToken},
          {"/dslaunch.Agent/Diagnose", RpcCredential::kAgentAndJobToken},
          // From a rank of this host: its own token, never the agent's.
          {"/dslaunch.Agent/Heartbeat", RpcCredential::kRankToken},
      }};
}

RpcAuthPolicy StoreAuthPolicy() {
  return RpcAuthPolicy{
      "rendezvous store",
      {
          {"/dslaunch.Store/Set", RpcCredential::kStoreToken},
          {"/dslaunch.Store/Get", RpcCredential::kStoreToken},
          {"/dslaunch.Store/Wait", RpcCredential::kStoreToken},
          {"/dslaunch.Store/Add", RpcCredential::kStoreToken},
          {"/dslaunch.Store/CompareSet", RpcCredential::kStoreToken},
          {"/dslaunch.Store/Delete", RpcCredential::kStoreToken},
      }};
}

RpcAuthPolicy ControllerAuthPolicy() {
  return RpcAuthPolicy{
      "dslaunch controller",
      {
          // A user's `dslaunch status`: the job's status file, or --token_file.
          {"/dslaunch.Controller/GetJobStatus", RpcCredential::kControllerToken},
      }};
}

}  // namespace dslaunch
