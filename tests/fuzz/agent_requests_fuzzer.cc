// libFuzzer target: the agent's authentication gate and request handlers
// (agent/agent_service.h) driven by a sequence of calls decoded from the
// input: Describe, StartRanks, KeepAlive, StopJob, Diagnose and Heartbeat,
// each with an agent token (the agent's, a wrong one, none) and for a job id
// with a job credential chosen by the input (one of two controllers', none,
// or bytes of the input), the request's other fields (lease, grace, attempt,
// core binding, environments) from the input too. Each call passes the gate
// as a server runs it (Admit) and, admitted, its handler. Every answer is
// checked against a model of Note [Per-job credentials]: the gate admits a
// call only with the agent token and, for a job, a strong credential; a job
// is bound to the credential that first named it, and a call for it with
// another is refused (PERMISSION_DENIED) unless the call may bind a job that
// is over; leases and grace periods are bounded; a heartbeat no rank of this
// agent could have sent is refused. StartRanks is called with its ranks
// removed (the handler would start processes); the pure parts that read
// them run on the whole request: each rank's environment (common_env under
// the rank's own, StartRanksEnvironment) and the core list split among the
// ranks (ParseCoreList, SplitCoresAmongRanks). A difference is a finding
// (__builtin_trap).
#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/test/server_context_test_spouse.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "agent/agent_service.h"
#include "agent/core_binding.h"
#include "common/auth_token.h"
#include "common/control_plane_limits.h"
#include "common/core_list.h"
#include "common/start_ranks_environment.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr char kControllerA[] = "3a0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100";
constexpr char kControllerB[] = "9c0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221177";

std::string Credential(FuzzedDataProvider& input) {
  switch (input.ConsumeIntegralInRange(0, 3)) {
    case 0: return kControllerA;
    case 1: return kControllerB;
    case 2: return "";
    default: return input.ConsumeRandomLengthString(40);
  }
}

std::string JobId(FuzzedDataProvider& input) {
  static const char* const kJobs[] = {"job-a", "job-b", ""};
  return input.ConsumeBool() ? kJobs[input.ConsumeIntegralInRange(0, 2)] : input.ConsumeRandomLengthString(12);
}

void FillEnvironment(FuzzedDataProvider& input, google::protobuf::Map<std::string, std::string>* env) {
  const int count = input.ConsumeIntegralInRange(0, 4);
  for (int i = 0; i < count; ++i) {
    const std::string key = input.ConsumeBool() ? std::string("K") + static_cast<char>('0' + i % 3)
                                                : input.ConsumeRandomLengthString(8);
    (*env)[key] = input.ConsumeRandomLengthString(8);
  }
}

// StartRanksEnvironment: the rank's own variables over the request's.
void CheckEnvironment(const dslaunch::StartRanksRequest& request, const dslaunch::RankSpec& rank) {
  const std::map<std::string, std::string> env = dslaunch::StartRanksEnvironment(request, rank);
  for (const auto& [key, value] : env) {
    auto own = rank.env().find(key);
    auto common = request.common_env().find(key);
    Check(own != rank.env().end() || common != request.common_env().end());
    Check(value == (own != rank.env().end() ? own->second : common->second));
  }
  for (const auto& [key, value] : rank.env()) Check(env.count(key) == 1);
  for (const auto& [key, value] : request.common_env()) Check(env.count(key) == 1);
}

// ParseCoreList and SplitCoresAmongRanks: ascending unique cores; shares of
// len / ranks consecutive listed cores each, in order, or a refusal.
void CheckCoreSplit(const std::string& text, int ranks) {
  auto cores = dslaunch::ParseCoreList(text, "--bind_core_list");
  if (!cores.ok()) return;
  for (size_t i = 0; i < cores->size(); ++i) {
    Check((*cores)[i] >= 0);
    if (i > 0) Check((*cores)[i - 1] < (*cores)[i]);
  }
  auto split = dslaunch::SplitCoresAmongRanks(*cores, ranks, {}, "fuzzhost");
  if (!split.ok()) {
    Check(ranks <= 0 || static_cast<int>(cores->size()) < ranks);
    return;
  }
  Check(ranks > 0 && static_cast<int>(split->size()) == ranks);
  const size_t each = cores->size() / static_cast<size_t>(ranks);
  for (int r = 0; r < ranks; ++r) {
    const dslaunch::RankCores& share = (*split)[static_cast<size_t>(r)];
    Check(share.cores.size() == each && share.numa_node == -1);
    for (size_t i = 0; i < each; ++i) Check(share.cores[i] == (*cores)[static_cast<size_t>(r) * each + i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  dslaunch::AgentConfig config;
  config.token = kControllerA;
  config.hostname = "fuzzhost";
  config.gpu_count = 8;
  config.lease_check_interval = std::chrono::hours(1);  // no lease runs out within an input
  dslaunch::RunAsUser trainee;
  trainee.name = "trainee";
  trainee.uid = 4242;
  trainee.gid = 4242;
  config.allowed_run_as = {trainee};
  dslaunch::AgentService agent(config);
  std::map<std::string, std::string> bound;  // job id -> the credential it is bound to

  int calls = 0;
  while (input.remaining_bytes() > 0 && calls++ < 64) {
    const int op = input.ConsumeIntegralInRange(0, 5);
    const std::string job = JobId(input);
    const std::string credential = Credential(input);
    const int agent_token = input.ConsumeIntegralInRange(0, 7);  // 0: none, 1: wrong, else the agent's
    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    if (agent_token > 0) spouse.AddClientMetadata(dslaunch::kTokenMetadataKey, agent_token == 1 ? kControllerB : kControllerA);
    if (!credential.empty()) spouse.AddClientMetadata(dslaunch::kJobTokenMetadataKey, credential);
    // The gate, as the server runs it before a handler; false: refused (as
    // the model says it must be), the handler not called.
    auto admitted = [&](const char* method, const google::protobuf::Message& request, bool per_job) {
      const grpc::Status gate = agent.Admit(method, context, request);
      const bool expected = agent_token >= 2 && (!per_job || dslaunch::CheckTokenStrength(credential).ok());
      Check(gate.ok() == expected);
      return gate.ok();
    };
    // Note [Per-job credentials], with no rank ever started here: every
    // known job is over, so a call that may bind takes the job over.
    auto expect_owner = [&](const grpc::Status& status, bool bind) {
      auto it = bound.find(job);
      if (bind) {
        Check(status.error_code() != grpc::StatusCode::PERMISSION_DENIED);
        bound[job] = credential;
      } else if (it != bound.end() && it->second != credential) {
        Check(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
      } else {
        Check(status.ok());
      }
    };

    switch (op) {
      case 0: {
        dslaunch::DescribeRequest request;
        dslaunch::DescribeReply reply;
        if (!admitted("/dslaunch.Agent/Describe", request, false)) break;
        Check(agent.Describe(&context, &request, &reply).ok());
        Check(reply.hostname() == "fuzzhost" && reply.gpu_count() == 8);
        break;
      }
      case 1: {
        dslaunch::StartRanksRequest request;
        request.set_job_id(job);
        request.set_attempt(input.ConsumeIntegralInRange(-2, 3));
        // No lease short enough to run out within an input (the lease
        // loop may wake early and would forget the job).
        int64_t lease = input.ConsumeIntegral<int64_t>();
        if (lease > 0 && lease < 3600 * 1000) lease = input.ConsumeBool() ? 0 : 3600 * 1000;
        request.set_lease_ms(lease);
        // Note [Ranks as another user]: the agent allows "trainee" (uid 4242).
        static const char* const kUsers[] = {"", "trainee", "4242", "root", "4243"};
        request.set_run_as(input.ConsumeBool() ? kUsers[input.ConsumeIntegralInRange(0, 4)]
                                               : input.ConsumeRandomLengthString(8));
        request.set_heartbeat_timeout_ms(input.ConsumeIntegral<int64_t>());
        if (input.ConsumeBool()) {
          request.mutable_core_binding()->set_enabled(true);
          request.mutable_core_binding()->set_core_list(input.ConsumeRandomLengthString(16));
        }
        FillEnvironment(input, request.mutable_common_env());
        const int ranks = input.ConsumeIntegralInRange(0, 6);
        for (int r = 0; r < ranks; ++r) {
          dslaunch::RankSpec* spec = request.add_ranks();
          spec->set_global_rank(r);
          spec->set_local_rank(r);
          spec->add_argv(input.ConsumeRandomLengthString(8));
          FillEnvironment(input, spec->mutable_env());
        }
        for (const dslaunch::RankSpec& spec : request.ranks()) CheckEnvironment(request, spec);
        CheckCoreSplit(request.core_binding().core_list(), ranks);
        request.clear_ranks();  // the handler would start them
        if (!admitted("/dslaunch.Agent/StartRanks", request, true)) break;
        dslaunch::StartRanksReply reply;
        const grpc::Status status = agent.StartRanks(&context, &request, &reply);
        if (job.empty() || request.lease_ms() > dslaunch::kMaxLeaseMs) {
          Check(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
          break;
        }
        if (!request.run_as().empty() && request.run_as() != "trainee" && request.run_as() != "4242") {
          Check(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);  // refused before the job is bound
          break;
        }
        // The job is bound before the core binding is checked.
        expect_owner(status, /*bind=*/true);
        if (!request.core_binding().enabled()) {
          Check(status.ok() && reply.pids_size() == 0 && reply.run_as_applied() == !request.run_as().empty());
        }
        break;
      }
      case 2: {
        dslaunch::KeepAliveRequest request;
        request.set_job_id(job);
        dslaunch::KeepAliveReply reply;
        if (!admitted("/dslaunch.Agent/KeepAlive", request, true)) break;
        expect_owner(agent.KeepAlive(&context, &request, &reply), /*bind=*/true);
        break;
      }
      case 3: {
        dslaunch::StopJobRequest request;
        request.set_job_id(job);
        request.set_attempt(input.ConsumeIntegralInRange(-2, 3));
        request.set_grace_ms(input.ConsumeBool() ? input.ConsumeIntegral<int64_t>()
                                                 : input.ConsumeIntegralInRange<int64_t>(0, 1000));
        request.set_reason(input.ConsumeRandomLengthString(16));
        request.set_requester(input.ConsumeRandomLengthString(16));
        dslaunch::StopJobReply reply;
        if (!admitted("/dslaunch.Agent/StopJob", request, true)) break;
        const grpc::Status status = agent.StopJob(&context, &request, &reply);
        if (request.grace_ms() > dslaunch::kMaxStopGraceMs) {
          Check(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
          break;
        }
        expect_owner(status, /*bind=*/false);
        if (status.ok()) Check(reply.signalled() == 0);
        break;
      }
      case 4: {
        dslaunch::DiagnoseRequest request;
        request.set_job_id(job);
        request.set_attempt(input.ConsumeIntegralInRange(-2, 3));
        dslaunch::DiagnoseReply reply;
        if (!admitted("/dslaunch.Agent/Diagnose", request, true)) break;
        expect_owner(agent.Diagnose(&context, &request, &reply), /*bind=*/false);
        break;
      }
      default: {
        // No rank was ever started: no rank token can be right.
        dslaunch::HeartbeatRequest request;
        request.set_job_id(job);
        request.set_attempt(input.ConsumeIntegralInRange(-2, 3));
        request.set_global_rank(input.ConsumeIntegralInRange(-1, 8));
        request.set_rank_token(input.ConsumeBool() ? std::string(kControllerA) : input.ConsumeRandomLengthString(64));
        request.set_step(input.ConsumeIntegral<int64_t>());
        dslaunch::HeartbeatReply reply;
        Check(agent.Admit("/dslaunch.Agent/Heartbeat", context, request).error_code() ==
              grpc::StatusCode::UNAUTHENTICATED);
        Check(agent.Heartbeat(&context, &request, &reply).error_code() == grpc::StatusCode::UNAUTHENTICATED);
        break;
      }
    }
  }
  return 0;
}
