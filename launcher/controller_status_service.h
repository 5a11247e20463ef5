// The Controller service (proto/controller.proto): the job's live status
// for `dslaunch status` (Note [Live job status], launcher/job_status_board.h),
// served on the rendezvous store's port behind its own authentication gate
// (the controller's token, common/rpc_auth_policy.h).
//
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/authenticated_service.h"
#include "launcher/job_status_board.h"
#include "proto/controller.grpc.pb.h"

namespace dslaunch {

class ControllerStatusService final {
 public:
  // `board` must outlive the server. A call must carry one of `tokens`: the
  // controller's own (the job's status file holds it) or the cluster token
  // of --token_file, when the job has one.
  ControllerStatusService(const JobStatusBoard* board, std::vector<std::string> tokens);

  // Registers the service on a builder the store already Serve()s.
  void ServeBeside(grpc::ServerBuilder& builder) { gate_.ServeBeside(builder); }

  grpc::Status GetJobStatus(grpc::ServerContext* context, const JobStatusRequest* request,
                            JobStatusReply* reply);

 private:
  const JobStatusBoard* const board_;
  const std::vector<std::string> tokens_;
  AuthenticatedService gate_;
};

}  // namespace dslaunch
