#include "common/authenticated_service.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace dslaunch {

// Answers every call to a method no service of the server registered.
class AuthenticatedService::UnlistedMethodRefusal final : public grpc::CallbackGenericService {
 public:
  explicit UnlistedMethodRefusal(std::string server) : server_(std::move(server)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    LogLine(absl::StrCat("refused ", context->method(), " from ", context->peer(),
                         ": not in the ", server_, " authentication table (nothing was run)"));
    return new Refusal(grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(server_, ": method ", context->method(),
                     " is not in the authentication table; refused")));
  }

 private:
  class Refusal final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Refusal(grpc::Status status) { Finish(std::move(status)); }
    void OnDone() override { delete this; }
  };

  const std::string server_;
};

AuthenticatedService::AuthenticatedService(RpcAuthPolicy policy,
                                           std::map<RpcCredential, CredentialCheck> checks)
    : policy_(std::move(policy)),
      checks_(std::move(checks)),
      unlisted_(std::make_unique<UnlistedMethodRefusal>(policy_.server)) {}

AuthenticatedService::~AuthenticatedService() = default;

const char* AuthenticatedService::Intern(const std::string& full_method) {
  method_names_.push_back(full_method);
  ++methods_added_;
  return method_names_.back().c_str();
}

void AuthenticatedService::Serve(grpc::ServerBuilder& builder) {
  builder.RegisterService(this);
  builder.RegisterCallbackGenericService(unlisted_.get());
}

void AuthenticatedService::ServeBeside(grpc::ServerBuilder& builder) { builder.RegisterService(this); }

grpc::Status AuthenticatedService::Admit(const std::string& full_method,
                                         const grpc::ServerContextBase& context,
                                         const google::protobuf::Message& request) const {
  const RpcCredential* credential = policy_.Find(full_method);
  if (credential == nullptr) {
    LogLine(absl::StrCat("refused ", full_method, " from ", context.peer(), ": not in the ",
                         policy_.server, " authentication table (nothing was run)"));
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(policy_.server, ": method ", full_method,
                                     " is not in the authentication table; refused"));
  }
  if (*credential == RpcCredential::kNone) return grpc::Status::OK;
  auto check = checks_.find(*credential);
  if (check == checks_.end()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(policy_.server, ": method ", full_method, " requires a ",
                                     RpcCredentialName(*credential),
                                     " that this server cannot check; refused"));
  }
  grpc::Status verdict = check->second(context, request);
  if (!verdict.ok()) {
    LogLine(absl::StrCat("refused ", full_method, " from ", context.peer(), ": missing or wrong ",
                         RpcCredentialName(*credential), " (nothing was run)"));
  }
  return verdict;
}

}  // namespace dslaunch
