// The rendezvous key-value store the controller hosts for its job's ranks
// (proto/store.proto). One mechanism for NCCL unique ids, barriers and, later,
// heartbeats and checkpoint commits; no second TCP store.
//
// Keys live in the namespace "<attempt>/<key>" of the controller's one job; a
// call for another job id is refused.
//
// Note [Waiting without a thread]: Wait is served on gRPC's callback API. A
// waiting call is an entry under each key it waits for and under its
// deadline, not a blocked thread: the 8,000 ranks of a 1,000-host job wait
// for their groups' NCCL ids at once. (A thread per waiting call made the
// sync server create and switch between thousands of threads: at 500 agents
// x 8 ranks, rendezvous took 7 s past the last StartRanks; see
// scripts/control-plane-scale.sh.) A write finishes the waiters of its key
// whose keys are all present; one thread finishes those whose timeout passed.
//
// Every call passes the authentication gate first (Note [One authentication
// gate], common/rpc_auth_policy.h): it carries a store token.
//
// Note [Store token per attempt]: the ranks of attempt N get a token of that
// attempt alone (TokenForAttempt, DSLAUNCH_STORE_TOKEN), which opens only
// attempt N's namespace: a rank left over from an earlier attempt, or one
// that learns its attempt's token, cannot write into (or read) another
// attempt's keys, nor into an attempt that has not started. The job's own
// token (the constructor's) opens every live attempt, for the controller's
// side and its tests.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/authenticated_service.h"
#include "launcher/store_change.h"
#include "proto/store.grpc.pb.h"

namespace dslaunch {

class RendezvousStore final {
 public:
  RendezvousStore(std::string job_id, std::string token);
  // Ends every waiter (ABORTED) and joins the deadline thread.
  ~RendezvousStore();

  // Registers the store, behind its authentication gate, with `builder`.
  void Serve(grpc::ServerBuilder& builder);

  // The RPCs of proto/store.proto; only the gate calls them.

  grpc::Status Set(grpc::ServerContext* context, const StoreSetRequest* request,
                   StoreSetReply* reply);
  grpc::Status Get(grpc::ServerContext* context, const StoreGetRequest* request,
                   StoreGetReply* reply);
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* context,
                                 const StoreWaitRequest* request, StoreWaitReply* reply);
  grpc::Status Add(grpc::ServerContext* context, const StoreAddRequest* request,
                   StoreAddReply* reply);
  grpc::Status CompareSet(grpc::ServerContext* context, const StoreCompareSetRequest* request,
                          StoreCompareSetReply* reply);
  grpc::Status Delete(grpc::ServerContext* context, const StoreDeleteRequest* request,
                      StoreDeleteReply* reply);

  // Wait without gRPC's reactor (Wait's core; the fuzzer's too): `done` runs
  // exactly once, outside the store's lock, with OK and the keys' values (in
  // the request's order, as they were when the last key appeared) once every
  // key exists, or with why not (timeout, the attempt is over, CancelWait)
  // and no values. Returns the waiter's id, or 0 when `done` has already run.
  using WaitDone = std::function<void(grpc::Status, std::vector<std::string> values)>;
  uint64_t StartWait(const grpc::ServerContextBase& context, const StoreWaitRequest& request,
                     WaitDone done);
  // Ends waiter `id` with CANCELLED, if it still waits.
  void CancelWait(uint64_t id);

  // Note [Store token per attempt]: attempt's token, made at the first call
  // (the controller asks for it as it starts the attempt's ranks).
  std::string TokenForAttempt(int attempt);

  // The controller's own write into an attempt's namespace (e.g. the
  // preemption request "control/preempt" that ranks poll).
  void SetForAttempt(int attempt, const std::string& key, const std::string& value);

  // Calls `observer(attempt, value)` after each Set of `key` by a rank (e.g.
  // "checkpoint/committed", Note [Live job status]), on the RPC's thread and
  // outside the store's lock. Register before the server starts.
  void ObserveSets(std::string key, std::function<void(int attempt, const std::string& value)> observer);

  // Note [Controller failover]: `record` gets every change of the store, in
  // the order they happen, under the store's lock, before the call that
  // made it is answered (the write-ahead log in the controller's journal).
  // Set before serving.
  void RecordChanges(std::function<void(const StoreChange&)> record);
  // Makes the store hold what the recorded `changes` left (a controller
  // taking over the job); before serving. Tells the observers of ObserveSets
  // the values restored.
  void Restore(const std::vector<StoreChange>& changes);
  // The controller's own read of an attempt's key; nullopt when absent.
  std::optional<std::string> GetForAttempt(int attempt, const std::string& key);

  // Forgets every key of `attempt` and ends its waiters with ABORTED (called
  // when an attempt is over).
  void DropAttempt(int attempt);

  // Ends every waiter with ABORTED (controller shutdown).
  void Shutdown();

  // Wait calls blocked now, and how many times a write has woken one so far
  // (tests: a write wakes only the waiters of its key).
  size_t WaitingCalls();
  int64_t WaitersWoken();

 private:
  // Job and a live attempt (the gate checked the token); the reason to
  // refuse the call otherwise.
  grpc::Status CheckCall(const grpc::ServerContextBase& context, const StoreScope& scope);
  // CheckCall, then the full key.
  grpc::Status Check(const grpc::ServerContextBase& context, const StoreScope& scope,
                     const std::string& key, std::string* full_key);
  static grpc::Status ScopedKey(const StoreScope& scope, const std::string& key,
                                std::string* full_key);
  static std::string AttemptPrefix(int attempt);
  // Hands `change` to record_, if set. REQUIRES: mu_ held.
  void Record(const StoreChange& change);

  const std::string job_id_;
  const std::string token_;
  // A write wakes only the waiters of the key it wrote: a barrier of N ranks
  // is N writes of a counter nobody waits on and one write of the key all N
  // wait for, so N waiting ranks cost O(N) wake-ups, not O(N^2).
  // Each returns the waiters it ended, to be told outside mu_ (RunDone).
  // REQUIRES: mu_ held.
  struct Ended {
    WaitDone done;
    grpc::Status status;
    std::vector<std::string> values;  // with OK: the keys' values
  };
  using EndedWaiters = std::vector<Ended>;
  EndedWaiters WakeWaitersOf(const std::string& key);
  // Ends the waiters of attempts that are over (every waiter after Shutdown).
  EndedWaiters EndWaitersOfOverAttempts();
  bool AllPresent(const std::vector<std::string>& keys) const;
  // The values of keys that all exist.
  std::vector<std::string> ValuesOf(const std::vector<std::string>& keys) const;
  // OK when every key exists, else DEADLINE_EXCEEDED naming the first missing.
  grpc::Status TimedOut(const std::vector<std::string>& keys, int64_t timeout_ms) const;
  // Removes waiter `id` from every index; its `done`.
  WaitDone TakeWaiter(uint64_t id);
  static void RunDone(EndedWaiters ended);
  // Ends waiters whose timeout passed, until the store is destroyed.
  void DeadlineLoop();

  struct Waiter {
    std::vector<std::string> keys;  // full keys
    int attempt = 0;
    int64_t timeout_ms = 0;
    WaitDone done;
    std::vector<std::multimap<std::string, uint64_t>::iterator> by_key;
    std::multimap<std::chrono::steady_clock::time_point, uint64_t>::iterator by_deadline;
  };

  // Set once before serving; read-only afterwards.
  std::multimap<std::string, std::function<void(int, const std::string&)>> observers_;
  std::mutex mu_;
  std::map<std::string, std::string> values_;  // guarded by mu_
  // Note [Waiting without a thread]: every waiting call, by id, by each key
  // it waits for and by its deadline.
  std::map<uint64_t, Waiter> waiting_;                                          // guarded by mu_
  std::multimap<std::string, uint64_t> waiters_;                                // guarded by mu_
  std::multimap<std::chrono::steady_clock::time_point, uint64_t> deadlines_;    // guarded by mu_
  uint64_t next_waiter_ = 1;                                                    // guarded by mu_
  int64_t waiters_woken_ = 0;                                                   // guarded by mu_
  bool destroying_ = false;                                                     // guarded by mu_
  std::condition_variable deadlines_changed_;
  int dropped_below_ = 0;   // attempts < this are over; guarded by mu_
  std::function<void(const StoreChange&)> record_;  // guarded by mu_
  std::map<int, std::string> attempt_tokens_;  // Note [Store token per attempt]; guarded by mu_
  bool shut_down_ = false;  // guarded by mu_
  AuthenticatedService gate_;
  std::thread deadline_thread_;  // DeadlineLoop; started last
};

}  // namespace dslaunch
