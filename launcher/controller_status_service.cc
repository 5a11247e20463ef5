#include "launcher/controller_status_service.h"

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"

namespace dslaunch {

ControllerStatusService::ControllerStatusService(const JobStatusBoard* board, std::vector<std::string> tokens)
    : board_(board),
      tokens_(std::move(tokens)),
      gate_(ControllerAuthPolicy(),
            {{RpcCredential::kControllerToken,
              [this](const grpc::ServerContextBase& context, const google::protobuf::Message&) {
                for (const std::string& token : tokens_) {
                  if (!token.empty() && CallHasToken(context, token)) return grpc::Status::OK;
                }
                return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                    "dslaunch controller: missing or wrong token (the job's status file holds it; "
                                    "for a job started with --token_file, pass the same --token_file)");
              }}}) {
  gate_.Unary("/dslaunch.Controller/GetJobStatus", this, &ControllerStatusService::GetJobStatus);
}

grpc::Status ControllerStatusService::GetJobStatus(grpc::ServerContext*, const JobStatusRequest* request,
                                                   JobStatusReply* reply) {
  if (!request->job_id().empty() && request->job_id() != board_->job_id()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("this dslaunch controller runs job '",
                                                                  board_->job_id(), "', not '", request->job_id(),
                                                                  "'"));
  }
  *reply = board_->Snapshot();
  return grpc::Status::OK;
}

}  // namespace dslaunch
