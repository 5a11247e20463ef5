#include "launcher/rendezvous_store.h"

#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth_token.h"

namespace dslaunch {

RendezvousStore::RendezvousStore(std::string job_id, std::string token)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      gate_(StoreAuthPolicy(),
            {{RpcCredential::kStoreToken,
              [this](const grpc::ServerContext& context, const google::protobuf::Message&) {
                if (CallHasToken(context, token_)) return grpc::Status::OK;
                // An attempt's token: which attempt it opens is CheckCall's.
                std::lock_guard<std::mutex> lock(mu_);
                for (const auto& [attempt, token] : attempt_tokens_) {
                  if (CallHasToken(context, token)) return grpc::Status::OK;
                }
                return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                    "rendezvous store: missing or wrong DSLAUNCH_STORE_TOKEN");
              }}}) {
  gate_.Unary("/dslaunch.Store/Set", this, &RendezvousStore::Set);
  gate_.Unary("/dslaunch.Store/Get", this, &RendezvousStore::Get);
  gate_.Unary("/dslaunch.Store/Wait", this, &RendezvousStore::Wait);
  gate_.Unary("/dslaunch.Store/Add", this, &RendezvousStore::Add);
  gate_.Unary("/dslaunch.Store/CompareSet", this, &RendezvousStore::CompareSet);
  gate_.Unary("/dslaunch.Store/Delete", this, &RendezvousStore::Delete);
}

void RendezvousStore::Serve(grpc::ServerBuilder& builder) { gate_.Serve(builder); }

std::string RendezvousStore::TokenForAttempt(int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, made] = attempt_tokens_.try_emplace(attempt);
  if (made) it->second = GenerateToken();
  return it->second;
}

std::string RendezvousStore::AttemptPrefix(int attempt) { return absl::StrCat(attempt, "/"); }

grpc::Status RendezvousStore::CheckCall(const grpc::ServerContext& context,
                                        const StoreScope& scope) {
  if (scope.job_id() != job_id_) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("rendezvous store serves job '", job_id_, "', not '",
                                     scope.job_id(), "'"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // A leftover process of a finished attempt must not write into the store.
  if (scope.attempt() < dropped_below_ || shut_down_) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        absl::StrCat("attempt ", scope.attempt(), " of job ", job_id_, " is over"));
  }
  // Note [Store token per attempt]: an attempt's token opens that attempt only.
  if (!CallHasToken(context, token_)) {
    auto own = attempt_tokens_.find(scope.attempt());
    if (own == attempt_tokens_.end() || !CallHasToken(context, own->second)) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat("rendezvous store: this DSLAUNCH_STORE_TOKEN does not open attempt ",
                                       scope.attempt(), own == attempt_tokens_.end() ? " (not started)" : ""));
    }
  }
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Check(const grpc::ServerContext& context, const StoreScope& scope,
                                    const std::string& key, std::string* full_key) {
  if (auto s = CheckCall(context, scope); !s.ok()) return s;
  return ScopedKey(scope, key, full_key);
}

grpc::Status RendezvousStore::ScopedKey(const StoreScope& scope, const std::string& key,
                                        std::string* full_key) {
  if (key.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "rendezvous store: empty key");
  }
  *full_key = AttemptPrefix(scope.attempt()) + key;
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Set(grpc::ServerContext* context, const StoreSetRequest* request,
                                  StoreSetReply*) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = request->value();
    WakeWaitersOf(key);
  }
  auto [first, last] = observers_.equal_range(request->key());
  for (auto it = first; it != last; ++it) it->second(request->scope().attempt(), request->value());
  return grpc::Status::OK;
}

void RendezvousStore::ObserveSets(std::string key,
                                  std::function<void(int attempt, const std::string& value)> observer) {
  observers_.emplace(std::move(key), std::move(observer));
}

grpc::Status RendezvousStore::Get(grpc::ServerContext* context, const StoreGetRequest* request,
                                  StoreGetReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  reply->set_found(it != values_.end());
  if (it != values_.end()) reply->set_value(it->second);
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Wait(grpc::ServerContext* context, const StoreWaitRequest* request,
                                   StoreWaitReply*) {
  if (auto s = CheckCall(*context, request->scope()); !s.ok()) return s;
  std::vector<std::string> keys;
  for (const auto& key : request->keys()) {
    std::string full;
    if (auto s = ScopedKey(request->scope(), key, &full); !s.ok()) return s;
    keys.push_back(std::move(full));
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(std::max<int64_t>(0, request->timeout_ms()));
  std::condition_variable changed;
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::multimap<std::string, std::condition_variable*>::iterator> registered;
  for (const auto& key : keys) registered.push_back(waiters_.emplace(key, &changed));
  struct Unregister {
    RendezvousStore* store;
    decltype(registered)* entries;
    ~Unregister() {  // runs with mu_ held: `lock` is destroyed after this
      for (auto it : *entries) store->waiters_.erase(it);
    }
  } unregister{this, &registered};
  auto all_present = [&] {
    for (const auto& key : keys) {
      if (!values_.count(key)) return false;
    }
    return true;
  };
  const int attempt = request->scope().attempt();
  while (!all_present()) {
    if (shut_down_ || attempt < dropped_below_) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          absl::StrCat("attempt ", attempt, " of job ", job_id_, " is over"));
    }
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    // Wake up now and then to notice a cancelled call.
    auto slice = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    changed.wait_until(lock, slice);
    if (std::chrono::steady_clock::now() >= deadline && !all_present()) {
      std::string missing;
      for (const auto& key : keys) {
        if (!values_.count(key)) {
          missing = key.substr(key.find('/') + 1);
          break;
        }
      }
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("store key '", missing, "' did not appear within ",
                                       request->timeout_ms(), " ms"));
    }
  }
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Add(grpc::ServerContext* context, const StoreAddRequest* request,
                                  StoreAddReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t current = 0;
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &current)) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("store key '", request->key(), "' holds '", it->second,
                                       "', not a counter"));
    }
    if (__builtin_add_overflow(current, request->delta(), &current)) {
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                          absl::StrCat("store counter '", request->key(), "' would overflow"));
    }
    values_[key] = absl::StrCat(current);
    reply->set_value(current);
    WakeWaitersOf(key);
  }
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::CompareSet(grpc::ServerContext* context,
                                         const StoreCompareSetRequest* request,
                                         StoreCompareSetReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  bool swapped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    bool matches = it == values_.end() ? request->expect_absent()
                                       : (!request->expect_absent() && it->second == request->expected());
    if (matches) {
      values_[key] = request->desired();
      swapped = true;
      WakeWaitersOf(key);
    }
    reply->set_swapped(swapped);
    auto now = values_.find(key);
    if (now != values_.end()) reply->set_value(now->second);
  }
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Delete(grpc::ServerContext* context,
                                     const StoreDeleteRequest* request, StoreDeleteReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  reply->set_deleted(values_.erase(key) > 0);
  return grpc::Status::OK;
}

void RendezvousStore::SetForAttempt(int attempt, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string full_key = AttemptPrefix(attempt) + key;
  values_[full_key] = value;
  WakeWaitersOf(full_key);
}

std::optional<std::string> RendezvousStore::GetForAttempt(int attempt, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(AttemptPrefix(attempt) + key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void RendezvousStore::DropAttempt(int attempt) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string prefix = AttemptPrefix(attempt);
    for (auto it = values_.lower_bound(prefix);
         it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = values_.erase(it);
    }
    dropped_below_ = std::max(dropped_below_, attempt + 1);
    WakeEveryWaiter();
  }
}

void RendezvousStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  WakeEveryWaiter();
}

void RendezvousStore::WakeWaitersOf(const std::string& key) {
  auto [begin, end] = waiters_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    it->second->notify_one();
    ++waiters_woken_;
  }
}

size_t RendezvousStore::WaitingCalls() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::condition_variable*> calls;
  for (const auto& [key, changed] : waiters_) calls.insert(changed);
  return calls.size();
}

int64_t RendezvousStore::WaitersWoken() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_woken_;
}

void RendezvousStore::WakeEveryWaiter() {
  for (auto& [key, changed] : waiters_) changed->notify_one();
}

}  // namespace dslaunch
