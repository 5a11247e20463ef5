// Plays the rank of another job that read every token it could find and now
// tries each one on the per-job calls of a dsagent: Note [Per-job
// credentials] (common/rpc_auth_policy.h) says none of them may work.
//
//   agent_intruder HOST:PORT TOKENS_FILE JOB_ID
//
// TOKENS_FILE holds one candidate per line (duplicates and blank lines are
// skipped). First each candidate is tried as the agent token on Describe, as
// an attacker would to learn which one it is ("K of N candidate(s) open
// Describe"). Then each candidate that did, and none, is tried as the agent
// token with every candidate, and none, as the job token, on StopJob,
// KeepAlive, Diagnose, Watch and StartRanks (a later attempt of JOB_ID that
// would run /bin/true): every call a controller makes for a job. Prints each
// call that the agent accepted and the distinct refusals; exits 0 when every
// call about the job was refused, 1 when one was accepted, 2 on a usage
// error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "proto/agent.grpc.pb.h"

namespace {

using dslaunch::Agent;

struct Outcome {
  int accepted = 0;
  int refused = 0;
  std::map<std::string, int> refusals;  // "CODE: message" -> count
};

void Prepare(grpc::ClientContext* context, const std::string& agent_token, const std::string& job_token) {
  if (!agent_token.empty()) dslaunch::AttachToken(context, agent_token);
  if (!job_token.empty()) dslaunch::AttachJobToken(context, job_token);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

void Record(const char* method, const grpc::Status& status, size_t agent_index, size_t job_index,
            Outcome* outcome) {
  if (status.ok()) {
    ++outcome->accepted;
    std::printf("ACCEPTED: %s with agent-token candidate %zu and job-token candidate %zu\n", method,
                agent_index, job_index);
    return;
  }
  ++outcome->refused;
  ++outcome->refusals[absl::StrCat(method, " ", status.error_code(), ": ", status.error_message())];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: agent_intruder HOST:PORT TOKENS_FILE JOB_ID\n");
    return 2;
  }
  const std::string job_id = argv[3];
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "agent_intruder: cannot read %s\n", argv[2]);
    return 2;
  }
  std::vector<std::string> candidates{""};  // index 0: no token at all
  std::set<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && seen.insert(line).second) candidates.push_back(line);
  }
  auto stub = Agent::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  std::vector<size_t> agent_tokens{0};  // none, and every candidate the agent takes
  for (size_t a = 1; a < candidates.size(); ++a) {
    grpc::ClientContext context;
    Prepare(&context, candidates[a], "");
    dslaunch::DescribeReply reply;
    if (stub->Describe(&context, dslaunch::DescribeRequest(), &reply).ok()) agent_tokens.push_back(a);
  }
  std::printf("%zu of %zu candidate(s) open Describe\n", agent_tokens.size() - 1, candidates.size() - 1);
  Outcome outcome;
  for (size_t a : agent_tokens) {
    for (size_t j = 0; j < candidates.size(); ++j) {
      const std::string& agent_token = candidates[a];
      const std::string& job_token = candidates[j];
      {
        grpc::ClientContext context;
        Prepare(&context, agent_token, job_token);
        dslaunch::StopJobRequest request;
        request.set_job_id(job_id);
        request.set_attempt(-1);
        request.set_grace_ms(0);
        request.set_reason("agent_intruder");
        request.set_requester(absl::StrCat("agent_intruder pid ", ::getpid()));
        dslaunch::StopJobReply reply;
        Record("StopJob", stub->StopJob(&context, request, &reply), a, j, &outcome);
      }
      {
        grpc::ClientContext context;
        Prepare(&context, agent_token, job_token);
        dslaunch::KeepAliveRequest request;
        request.set_job_id(job_id);
        dslaunch::KeepAliveReply reply;
        Record("KeepAlive", stub->KeepAlive(&context, request, &reply), a, j, &outcome);
      }
      {
        grpc::ClientContext context;
        Prepare(&context, agent_token, job_token);
        dslaunch::DiagnoseRequest request;
        request.set_job_id(job_id);
        request.set_attempt(0);
        dslaunch::DiagnoseReply reply;
        Record("Diagnose", stub->Diagnose(&context, request, &reply), a, j, &outcome);
      }
      {
        // A watcher that is accepted takes the job's event stream over.
        grpc::ClientContext context;
        Prepare(&context, agent_token, job_token);
        dslaunch::WatchRequest request;
        request.set_job_id(job_id);
        auto reader = stub->Watch(&context, request);
        dslaunch::RankEvent event;
        if (reader->Read(&event) && event.has_accepted()) {
          context.TryCancel();
          reader->Finish();
          Record("Watch", grpc::Status::OK, a, j, &outcome);
        } else {
          Record("Watch", reader->Finish(), a, j, &outcome);
        }
      }
      {
        grpc::ClientContext context;
        Prepare(&context, agent_token, job_token);
        dslaunch::StartRanksRequest request;
        request.set_job_id(job_id);
        request.set_attempt(1000);
        dslaunch::RankSpec* rank = request.add_ranks();
        rank->set_global_rank(0);
        rank->add_argv("/bin/true");
        dslaunch::StartRanksReply reply;
        Record("StartRanks", stub->StartRanks(&context, request, &reply), a, j, &outcome);
      }
    }
  }
  std::printf("calls about job %s: %d refused, %d accepted\n", job_id.c_str(), outcome.refused, outcome.accepted);
  for (const auto& [refusal, count] : outcome.refusals) std::printf("  refused %d x %s\n", count, refusal.c_str());
  return outcome.accepted == 0 ? 0 : 1;
}
