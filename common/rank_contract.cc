#include "common/rank_contract.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dslaunch {
namespace {

// Reads one variable of the contract; remembers the first error.
class ContractReader {
 public:
  explicit ContractReader(const EnvLookup& lookup) : lookup_(lookup) {}

  std::string Text(const char* name) const {
    const char* value = lookup_(name);
    return value == nullptr ? "" : value;
  }
  bool IsSet(const char* name) const {
    const char* value = lookup_(name);
    return value != nullptr && *value != '\0';
  }
  // A non-negative integer at least `minimum`; `fallback` when unset.
  int Int(const char* name, int fallback, int minimum = 0) {
    if (!IsSet(name)) return fallback;
    const std::string text = Text(name);
    int value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < minimum) {
      Fail(absl::StrCat(name, "='", text, "' is not an integer >= ", minimum));
      return fallback;
    }
    return value;
  }
  // Malformed: InvalidArgument; missing: FailedPrecondition.
  void Fail(std::string message, absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    if (error_.ok()) {
      error_ = absl::Status(code, absl::StrCat("rank environment (docs/control-plane.md): ", message));
    }
  }
  const absl::Status& error() const { return error_; }

 private:
  const EnvLookup& lookup_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<RankEnvironment> ParseRankEnvironment(const EnvLookup& lookup) {
  using namespace rank_env;
  ContractReader read(lookup);
  RankEnvironment env;
  env.world_size = read.Int(kWorldSize, 1, 1);
  env.rank = read.Int(kRank, 0);
  env.local_world_size = read.Int(kLocalWorldSize, 1, 1);
  env.local_rank = read.Int(kLocalRank, 0);
  env.num_nodes = read.Int(kGroupWorldSize, 1, 1);
  env.node_rank = read.Int(kGroupRank, 0);
  env.env_version = read.Int(kEnvVersionName, 0);
  env.attempt = read.Int(kAttempt, 0);
  env.heartbeat_ms = read.Int(kHeartbeatMs, 1000, 1);
  env.job_id = read.Text(kJobId);
  env.store_addr = read.Text(kStoreAddr);
  env.store_token = read.Text(kStoreToken);
  env.agent_addr = read.Text(kAgentAddr);
  env.rank_token = read.Text(kRankToken);
  env.resume_tag = read.Text(kResumeTag);
  env.tls_dir = read.Text(kTlsDir);
  if (read.IsSet(kElastic)) {
    const std::string elastic = read.Text(kElastic);
    if (elastic != "1" && elastic != "0") read.Fail(absl::StrCat(kElastic, "='", elastic, "' is not 0 or 1"));
    env.elastic = elastic == "1";
  }
  if (!read.error().ok()) return read.error();

  if (env.rank >= env.world_size) {
    read.Fail(absl::StrCat(kRank, "=", env.rank, " is not below ", kWorldSize, "=", env.world_size));
  } else if (env.local_rank >= env.local_world_size) {
    read.Fail(absl::StrCat(kLocalRank, "=", env.local_rank, " is not below ", kLocalWorldSize, "=",
                           env.local_world_size));
  } else if (env.node_rank >= env.num_nodes) {
    read.Fail(absl::StrCat(kGroupRank, "=", env.node_rank, " is not below ", kGroupWorldSize, "=",
                           env.num_nodes));
  } else if (env.env_version > kEnvVersion) {
    read.Fail(absl::StrCat(kEnvVersionName, "=", env.env_version, " is newer than this program's contract (version ",
                           kEnvVersion, "): rebuild it against this dslaunch"));
  } else if (env.has_store()) {
    for (const char* name : {kStoreToken, kJobId, kAttempt}) {
      if (!read.IsSet(name)) {
        read.Fail(absl::StrCat(kStoreAddr, " is set but ", name, " is not"), absl::StatusCode::kFailedPrecondition);
      }
    }
  }
  if (!read.error().ok()) return read.error();
  return env;
}

absl::StatusOr<RankEnvironment> ReadRankEnvironment() {
  return ParseRankEnvironment([](const char* name) { return std::getenv(name); });
}

}  // namespace dslaunch
