// Sends one StopJob to a dsagent, as an operator's tool (or another job's
// controller) would: the integration tests' outside stop (Note [Honest
// exits], launcher/job_controller.h).
//
//   agent_stop_job HOST:PORT TOKEN_FILE JOB_ID REASON
//
// Prints how many ranks the agent signalled; exits 0 when the call succeeded.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <grpcpp/create_channel.h>

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "proto/agent.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: agent_stop_job HOST:PORT TOKEN_FILE JOB_ID REASON\n");
    return 2;
  }
  auto token = dslaunch::ReadTokenFile(argv[2]);
  if (!token.ok()) {
    std::fprintf(stderr, "agent_stop_job: %s\n", std::string(token.status().message()).c_str());
    return 2;
  }
  auto stub = dslaunch::Agent::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  dslaunch::AttachToken(&context, *token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  dslaunch::StopJobRequest request;
  request.set_job_id(argv[3]);
  request.set_attempt(-1);
  request.set_grace_ms(1000);
  request.set_reason(argv[4]);
  request.set_requester(absl::StrCat("agent_stop_job pid ", ::getpid()));
  dslaunch::StopJobReply reply;
  grpc::Status status = stub->StopJob(&context, request, &reply);
  if (!status.ok()) {
    std::fprintf(stderr, "agent_stop_job: %s\n", status.error_message().c_str());
    return 1;
  }
  std::printf("signalled %d\n", reply.signalled());
  return 0;
}
