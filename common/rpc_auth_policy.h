// Which credential each RPC of the control plane requires: the one table a
// reviewer reads to know who may call what.
//
// Note [One authentication gate]
// Every gRPC service of dslaunch is served through an AuthenticatedService
// (common/authenticated_service.h) built from a table below: before a handler
// runs, the gate looks the full method name up in the table and checks the
// credential it names. A method missing from the table is refused
// (PERMISSION_DENIED naming it), so a new RPC is closed until someone decides
// who may call it; rpc_auth_policy_test.cc fails when a method of a service's
// proto descriptor is not in its table. Handlers never authenticate by hand.
//
// Why not a grpc::experimental::ServerInterceptor or an AuthMetadataProcessor
// (checked against Debian bookworm's gRPC 1.51): a server interceptor cannot
// end a call before its handler runs (Hijack is client-only), and
// InsecureServerCredentials aborts on SetAuthMetadataProcessor
// (insecure_server_credentials.cc: "assertion failed: 0"). The gate wraps the
// method handlers instead, which gRPC's own generated code does the same way.
//
// Note [Per-job credentials]
// The agent token (--token_file, or one of the run for agents dslaunch starts)
// lets a controller use an agent: Describe, ReservePort. Every call about one
// job (StartRanks, StopJob, KeepAlive, Watch, Diagnose: each request names a
// job_id) also needs that job's own credential, kAgentAndJobToken: a token
// the controller makes for its run, keeps in its memory only (no file, no
// command line, no environment) and sends in "x-dslaunch-job-token". The
// first call that names a job the agent does not know binds the job to the
// credential it carries; every later call for that job must carry the same
// one, or it is PERMISSION_DENIED. So a rank of another job that read every
// file, command line and environment it could, the agent token included,
// still cannot stop, watch, diagnose, keep alive or add ranks to a job it
// does not own; neither can a second dslaunch started with the same --job_id.
// Ranks never get a job credential: a rank's Heartbeat carries its own rank
// token. A job credential must be as strong as any token (CheckTokenStrength).
// What this does not stop: a process of the controller's own user that can
// ptrace it or read its memory; that needs ranks run as another user.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

namespace dslaunch {

enum class RpcCredential {
  kNone,        // anyone who can reach the port (nothing listed uses it today)
  kAgentToken,  // the cluster token from --token_file, in "x-dslaunch-token"
  kRankToken,   // a rank's own DSLAUNCH_RANK_TOKEN, in the request's rank_token
  kStoreToken,  // the job's DSLAUNCH_STORE_TOKEN, in "x-dslaunch-token"
  // The controller's own token, in "x-dslaunch-token": --token_file's token,
  // or one made for this run; the job's status file (0600) holds it
  // (launcher/job_status_file.h). Ranks never get it.
  kControllerToken,
  // Note [Per-job credentials]: the agent token in "x-dslaunch-token" and the
  // credential the job named by the request's job_id is bound to, in
  // "x-dslaunch-job-token" (the first call for an unknown job binds it).
  kAgentAndJobToken,
};

const char* RpcCredentialName(RpcCredential credential);

struct RpcAuthPolicy {
  std::string server;  // "dsagent": names the server in refusals and logs
  std::map<std::string, RpcCredential> methods;  // full method name -> credential

  // The credential `full_method` requires; nullptr when it is not listed.
  const RpcCredential* Find(const std::string& full_method) const;

  // Full names of the methods of `service` that the table does not list
  // (empty when the table covers the service).
  std::vector<std::string> Unlisted(const google::protobuf::ServiceDescriptor& service) const;
};

// dsagent's service (proto/agent.proto).
RpcAuthPolicy AgentAuthPolicy();

// The controller's rendezvous store (proto/store.proto).
RpcAuthPolicy StoreAuthPolicy();

// The controller's job status (proto/controller.proto), on the store's port.
RpcAuthPolicy ControllerAuthPolicy();

}  // namespace dslaunch
