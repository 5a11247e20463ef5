// The one authentication gate of every dslaunch gRPC server (Note [One
// authentication gate], common/rpc_auth_policy.h).
//
// An AuthenticatedService is the grpc::Service a server registers: each RPC
// is bound to its implementation with Unary/ServerStreaming, and before the
// implementation runs the gate finds the method in the policy table and runs
// the check of the credential listed there. A method the table does not list
// is refused with PERMISSION_DENIED naming it; so is a credential without a
// check (fail closed). A call to a method nobody bound (a newer client, a
// probe for grpc.health.v1) is refused the same way by the service's
// unlisted-method handler, which Serve registers beside it.
//
// Usage:
//   AuthenticatedService gate(AgentAuthPolicy(), {{RpcCredential::kAgentToken, check}});
//   gate.Unary("/dslaunch.Agent/Describe", this, &AgentService::Describe);
//   gate.Serve(builder);
//
// Thread-safe once serving; bind every method before the server starts.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <google/protobuf/message.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/callback_common.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include "common/rpc_auth_policy.h"

namespace dslaunch {

// OK when the call carries the credential; otherwise the status the caller
// gets (its message is what users read: say which flag or variable to check).
using CredentialCheck =
    std::function<grpc::Status(const grpc::ServerContextBase& context,
                               const google::protobuf::Message& request)>;

class AuthenticatedService final : public grpc::Service {
 public:
  AuthenticatedService(RpcAuthPolicy policy, std::map<RpcCredential, CredentialCheck> checks);
  ~AuthenticatedService() override;

  template <class Impl, class Request, class Reply>
  void Unary(const std::string& full_method, Impl* impl,
             grpc::Status (Impl::*handler)(grpc::ServerContext*, const Request*, Reply*)) {
    const char* name = Intern(full_method);
    AddMethod(new grpc::internal::RpcServiceMethod(
        name, grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<Impl, Request, Reply>(
            [this, name, handler](Impl* target, grpc::ServerContext* context,
                                  const Request* request, Reply* reply) {
              if (grpc::Status refused = Admit(name, *context, *request); !refused.ok()) {
                return refused;
              }
              return (target->*handler)(context, request, reply);
            },
            impl)));
  }

  template <class Impl, class Request, class Reply>
  void ServerStreaming(const std::string& full_method, Impl* impl,
                       grpc::Status (Impl::*handler)(grpc::ServerContext*, const Request*,
                                                     grpc::ServerWriter<Reply>*)) {
    const char* name = Intern(full_method);
    AddMethod(new grpc::internal::RpcServiceMethod(
        name, grpc::internal::RpcMethod::SERVER_STREAMING,
        new grpc::internal::ServerStreamingHandler<Impl, Request, Reply>(
            [this, name, handler](Impl* target, grpc::ServerContext* context,
                                  const Request* request, grpc::ServerWriter<Reply>* writer) {
              if (grpc::Status refused = Admit(name, *context, *request); !refused.ok()) {
                return refused;
              }
              return (target->*handler)(context, request, writer);
            },
            impl)));
  }

  // A unary method on gRPC's callback API: the handler returns a reactor and
  // may finish it later, holding no thread while it waits (the store's Wait).
  // A refused call is finished by the gate and never reaches the handler.
  template <class Impl, class Request, class Reply>
  void CallbackUnary(const std::string& full_method, Impl* impl,
                     grpc::ServerUnaryReactor* (Impl::*handler)(grpc::CallbackServerContext*,
                                                                const Request*, Reply*)) {
    const char* name = Intern(full_method);
    AddMethod(new grpc::internal::RpcServiceMethod(name, grpc::internal::RpcMethod::NORMAL_RPC,
                                                   nullptr));
    MarkMethodCallback(
        methods_added_ - 1,
        new grpc::internal::CallbackUnaryHandler<Request, Reply>(
            [this, name, impl, handler](grpc::CallbackServerContext* context,
                                        const Request* request, Reply* reply) {
              if (grpc::Status refused = Admit(name, *context, *request); !refused.ok()) {
                grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
                reactor->Finish(refused);
                return reactor;
              }
              return (impl->*handler)(context, request, reply);
            }));
  }

  // Registers this service and the refusal of unlisted methods with `builder`
  // (which then takes no other generic service).
  void Serve(grpc::ServerBuilder& builder);
  // Registers this service on a builder that another AuthenticatedService
  // already Serve()s: that one's refusal answers methods nobody bound.
  void ServeBeside(grpc::ServerBuilder& builder);

  // OK, or why `full_method` is refused for this call (the gate itself;
  // public for tests).
  grpc::Status Admit(const std::string& full_method, const grpc::ServerContextBase& context,
                     const google::protobuf::Message& request) const;

  const RpcAuthPolicy& policy() const { return policy_; }

 private:
  class UnlistedMethodRefusal;

  // gRPC keeps a method's name as a const char*: it must outlive the server.
  // Also counts the methods added (the index MarkMethodCallback takes).
  const char* Intern(const std::string& full_method);

  const RpcAuthPolicy policy_;
  const std::map<RpcCredential, CredentialCheck> checks_;
  std::deque<std::string> method_names_;  // stable addresses
  int methods_added_ = 0;
  std::unique_ptr<grpc::CallbackGenericService> unlisted_;
};

}  // namespace dslaunch
