// Client of the controller's rendezvous store, for rank processes (and the
// runtime's communicators). Thread-safe: one client may be shared by threads.
//
// A rank finds the store through the rank environment (DSLAUNCH_STORE_ADDR,
// DSLAUNCH_STORE_TOKEN, DSLAUNCH_JOB_ID, DSLAUNCH_ATTEMPT: Note [Rank
// environment contract], common/rank_contract.h). Keys are scoped by job and attempt on the server, so a restarted attempt
// starts from an empty namespace.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <grpcpp/security/credentials.h>

#include "proto/store.grpc.pb.h"

namespace dslaunch {

struct RankEnvironment;

class StoreClient {
 public:
  // Plaintext unless `credentials` are given (Note [Mutual TLS]).
  StoreClient(const std::string& address, std::string token, std::string job_id, int attempt,
              std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  // Builds a client from the rank environment (Note [Rank environment contract]).
  // Errors name the missing or malformed variable.
  static absl::StatusOr<std::unique_ptr<StoreClient>> FromEnvironment();
  // The same from a contract already read; FailedPrecondition when it has no store.
  static absl::StatusOr<std::unique_ptr<StoreClient>> FromContract(const RankEnvironment& env);

  absl::Status Set(const std::string& key, const std::string& value);
  // nullopt when the key does not exist.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  // Waits until every key exists; DEADLINE_EXCEEDED after `timeout`.
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The same, returning the keys' values in `keys`' order (empty from a
  // store that sends none).
  absl::StatusOr<std::vector<std::string>> WaitValues(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds timeout);
  // Wait for one key, then return its value: one call (the Wait's reply
  // carries it); a second, a Get, only against a store that sends no values.
  absl::StatusOr<std::string> WaitGet(const std::string& key, std::chrono::milliseconds timeout);
  // Atomically adds `delta` to a counter (absent = 0) and returns the new value.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);

  struct CompareSetResult {
    bool swapped = false;
    std::string value;  // the value stored after the call
  };
  // Sets `key` to `desired` if its value equals `expected` (nullopt: the key is absent).
  absl::StatusOr<CompareSetResult> CompareSet(const std::string& key,
                                              const std::optional<std::string>& expected,
                                              const std::string& desired);
  // True when the key existed.
  absl::StatusOr<bool> Delete(const std::string& key);

  // Every one of `world_size` callers passing the same `name` returns once all
  // have arrived. A name is single-use; use a new name per barrier.
  absl::Status Barrier(const std::string& name, int world_size, std::chrono::milliseconds timeout);

  const std::string& job_id() const { return job_id_; }
  int attempt() const { return attempt_; }

 private:
  void Prepare(grpc::ClientContext* context, std::chrono::milliseconds deadline) const;
  void FillScope(StoreScope* scope) const;

  std::unique_ptr<Store::Stub> stub_;
  const std::string token_;
  const std::string job_id_;
  const int attempt_;
};

}  // namespace dslaunch
