#include "launcher/rendezvous_store.h"

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
              [this](const grpc::ServerContextBase& context, const google::protobuf::Message&) {
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
  gate_.CallbackUnary("/dslaunch.Store/Wait", this, &RendezvousStore::Wait);
  gate_.Unary("/dslaunch.Store/Add", this, &RendezvousStore::Add);
  gate_.Unary("/dslaunch.Store/CompareSet", this, &RendezvousStore::CompareSet);
  gate_.Unary("/dslaunch.Store/Delete", this, &RendezvousStore::Delete);
  deadline_thread_ = std::thread([this] { DeadlineLoop(); });
}

RendezvousStore::~RendezvousStore() {
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    destroying_ = true;
    shut_down_ = true;
    ended = EndWaitersOfOverAttempts();
  }
  deadlines_changed_.notify_all();
  RunDone(std::move(ended));
  if (deadline_thread_.joinable()) deadline_thread_.join();
}

void RendezvousStore::Serve(grpc::ServerBuilder& builder) { gate_.Serve(builder); }

std::string RendezvousStore::TokenForAttempt(int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, made] = attempt_tokens_.try_emplace(attempt);
  if (made) {
    it->second = GenerateToken();
    StoreChange token;
    token.kind = StoreChange::Kind::kAttemptToken;
    token.attempt = attempt;
    token.value = it->second;
    Record(token);
  }
  return it->second;
}

void RendezvousStore::Record(const StoreChange& change) {
  if (record_) record_(change);
}

void RendezvousStore::RecordChanges(std::function<void(const StoreChange&)> record) {
  std::lock_guard<std::mutex> lock(mu_);
  record_ = std::move(record);
}

void RendezvousStore::Restore(const std::vector<StoreChange>& changes) {
  struct Restored {
    const std::function<void(int, const std::string&)>* observer;
    int attempt;
    std::string value;
  };
  std::vector<Restored> restored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const StoreChange& change : changes) {
      switch (change.kind) {
        case StoreChange::Kind::kPut:
          values_[change.key] = change.value;
          break;
        case StoreChange::Kind::kDelete:
          values_.erase(change.key);
          break;
        case StoreChange::Kind::kDropAttempt: {
          const std::string prefix = AttemptPrefix(change.attempt);
          for (auto it = values_.lower_bound(prefix);
               it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
            it = values_.erase(it);
          }
          dropped_below_ = std::max(dropped_below_, change.attempt + 1);
          break;
        }
        case StoreChange::Kind::kAttemptToken:
          attempt_tokens_[change.attempt] = change.value;
          break;
      }
    }
    for (const auto& [key, observer] : observers_) {
      for (const auto& [attempt, token] : attempt_tokens_) {
        auto it = values_.find(AttemptPrefix(attempt) + key);
        if (it != values_.end()) restored.push_back({&observer, attempt, it->second});
      }
    }
  }
  // The observers learn what they would have seen (the newest committed
  // checkpoint, Note [Live job status]).
  for (const Restored& value : restored) (*value.observer)(value.attempt, value.value);
}

std::string RendezvousStore::AttemptPrefix(int attempt) { return absl::StrCat(attempt, "/"); }

grpc::Status RendezvousStore::CheckCall(const grpc::ServerContextBase& context,
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

grpc::Status RendezvousStore::Check(const grpc::ServerContextBase& context, const StoreScope& scope,
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
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = request->value();
    Record({StoreChange::Kind::kPut, key, request->value()});
    ended = WakeWaitersOf(key);
  }
  RunDone(std::move(ended));
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

grpc::ServerUnaryReactor* RendezvousStore::Wait(grpc::CallbackServerContext* context,
                                                const StoreWaitRequest* request, StoreWaitReply* reply) {
  // Finishes the call once StartWait's `done` runs; a cancelled call (the
  // rank died, its deadline passed) ends its waiter.
  class WaitCall final : public grpc::ServerUnaryReactor {
   public:
    explicit WaitCall(RendezvousStore* store) : store_(store) {}
    void Begin(uint64_t id) {
      std::lock_guard<std::mutex> lock(mu_);
      id_ = id;
      if (cancelled_ && id_ != 0) store_->CancelWait(id_);
    }
    void OnCancel() override {
      uint64_t id = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled_ = true;
        id = id_;
      }
      if (id != 0) store_->CancelWait(id);
    }
    void OnDone() override { delete this; }

   private:
    RendezvousStore* const store_;
    std::mutex mu_;
    uint64_t id_ = 0;        // guarded by mu_
    bool cancelled_ = false;  // guarded by mu_
  };
  auto* call = new WaitCall(this);
  call->Begin(StartWait(*context, *request, [call, reply](grpc::Status status, std::vector<std::string> values) {
    for (std::string& value : values) reply->add_values(std::move(value));
    call->Finish(status);
  }));
  return call;
}

uint64_t RendezvousStore::StartWait(const grpc::ServerContextBase& context,
                                    const StoreWaitRequest& request, WaitDone done) {
  if (auto s = CheckCall(context, request.scope()); !s.ok()) {
    done(s, {});
    return 0;
  }
  std::vector<std::string> keys;
  for (const auto& key : request.keys()) {
    std::string full;
    if (auto s = ScopedKey(request.scope(), key, &full); !s.ok()) {
      done(s, {});
      return 0;
    }
    keys.push_back(std::move(full));
  }
  const int64_t timeout_ms = std::max<int64_t>(0, request.timeout_ms());
  EndedWaiters ended;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int attempt = request.scope().attempt();
    if (AllPresent(keys)) {
      ended.push_back({std::move(done), grpc::Status::OK, ValuesOf(keys)});
    } else if (shut_down_ || attempt < dropped_below_) {
      ended.push_back({std::move(done), grpc::Status(grpc::StatusCode::ABORTED,
                                                     absl::StrCat("attempt ", attempt, " of job ",
                                                                  job_id_, " is over")),
                       {}});
    } else if (timeout_ms == 0) {
      ended.push_back({std::move(done), TimedOut(keys, timeout_ms), {}});
    } else {
      id = next_waiter_++;
      Waiter& waiter = waiting_[id];
      waiter.keys = std::move(keys);
      waiter.attempt = attempt;
      waiter.timeout_ms = timeout_ms;
      waiter.done = std::move(done);
      for (const auto& key : waiter.keys) waiter.by_key.push_back(waiters_.emplace(key, id));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      waiter.by_deadline = deadlines_.emplace(deadline, id);
      if (waiter.by_deadline == deadlines_.begin()) deadlines_changed_.notify_all();
    }
  }
  RunDone(std::move(ended));
  return id;
}

void RendezvousStore::CancelWait(uint64_t id) {
  WaitDone done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = TakeWaiter(id);
  }
  if (done) done(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"), {});
}

grpc::Status RendezvousStore::TimedOut(const std::vector<std::string>& keys, int64_t timeout_ms) const {
  for (const auto& key : keys) {
    if (!values_.count(key)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("store key '", key.substr(key.find('/') + 1),
                                       "' did not appear within ", timeout_ms, " ms"));
    }
  }
  return grpc::Status::OK;
}

std::vector<std::string> RendezvousStore::ValuesOf(const std::vector<std::string>& keys) const {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(values_.at(key));
  return values;
}

bool RendezvousStore::AllPresent(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (!values_.count(key)) return false;
  }
  return true;
}

RendezvousStore::WaitDone RendezvousStore::TakeWaiter(uint64_t id) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return nullptr;
  for (auto entry : it->second.by_key) waiters_.erase(entry);
  deadlines_.erase(it->second.by_deadline);
  WaitDone done = std::move(it->second.done);
  waiting_.erase(it);
  return done;
}

void RendezvousStore::RunDone(EndedWaiters ended) {
  for (auto& [done, status, values] : ended) done(status, std::move(values));
}

void RendezvousStore::DeadlineLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!destroying_) {
    if (deadlines_.empty()) {
      deadlines_changed_.wait(lock);
      continue;
    }
    const auto earliest = deadlines_.begin()->first;
    if (std::chrono::steady_clock::now() < earliest) {
      deadlines_changed_.wait_until(lock, earliest);
      continue;
    }
    const uint64_t id = deadlines_.begin()->second;
    const Waiter& waiter = waiting_.at(id);
    grpc::Status status = TimedOut(waiter.keys, waiter.timeout_ms);
    std::vector<std::string> values;
    if (status.ok()) values = ValuesOf(waiter.keys);
    WaitDone done = TakeWaiter(id);
    lock.unlock();
    done(status, std::move(values));
    lock.lock();
  }
}

grpc::Status RendezvousStore::Add(grpc::ServerContext* context, const StoreAddRequest* request,
                                  StoreAddReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  EndedWaiters ended;
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
    Record({StoreChange::Kind::kPut, key, values_[key]});
    reply->set_value(current);
    ended = WakeWaitersOf(key);
  }
  RunDone(std::move(ended));
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::CompareSet(grpc::ServerContext* context,
                                         const StoreCompareSetRequest* request,
                                         StoreCompareSetReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  bool swapped = false;
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    bool matches = it == values_.end() ? request->expect_absent()
                                       : (!request->expect_absent() && it->second == request->expected());
    if (matches) {
      values_[key] = request->desired();
      Record({StoreChange::Kind::kPut, key, request->desired()});
      swapped = true;
      ended = WakeWaitersOf(key);
    }
    reply->set_swapped(swapped);
    auto now = values_.find(key);
    if (now != values_.end()) reply->set_value(now->second);
  }
  RunDone(std::move(ended));
  return grpc::Status::OK;
}

grpc::Status RendezvousStore::Delete(grpc::ServerContext* context,
                                     const StoreDeleteRequest* request, StoreDeleteReply* reply) {
  std::string key;
  if (auto s = Check(*context, request->scope(), request->key(), &key); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  reply->set_deleted(values_.erase(key) > 0);
  if (reply->deleted()) Record({StoreChange::Kind::kDelete, key, ""});
  return grpc::Status::OK;
}

void RendezvousStore::SetForAttempt(int attempt, const std::string& key, const std::string& value) {
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string full_key = AttemptPrefix(attempt) + key;
    values_[full_key] = value;
    Record({StoreChange::Kind::kPut, full_key, value});
    ended = WakeWaitersOf(full_key);
  }
  RunDone(std::move(ended));
}

std::optional<std::string> RendezvousStore::GetForAttempt(int attempt, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(AttemptPrefix(attempt) + key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void RendezvousStore::DropAttempt(int attempt) {
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string prefix = AttemptPrefix(attempt);
    for (auto it = values_.lower_bound(prefix);
         it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = values_.erase(it);
    }
    dropped_below_ = std::max(dropped_below_, attempt + 1);
    StoreChange dropped;
    dropped.kind = StoreChange::Kind::kDropAttempt;
    dropped.attempt = attempt;
    Record(dropped);
    ended = EndWaitersOfOverAttempts();
  }
  RunDone(std::move(ended));
}

void RendezvousStore::Shutdown() {
  EndedWaiters ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    ended = EndWaitersOfOverAttempts();
  }
  RunDone(std::move(ended));
}

RendezvousStore::EndedWaiters RendezvousStore::WakeWaitersOf(const std::string& key) {
  std::vector<uint64_t> ready;
  auto [begin, end] = waiters_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    ++waiters_woken_;
    if (AllPresent(waiting_.at(it->second).keys)) ready.push_back(it->second);
  }
  EndedWaiters ended;
  for (uint64_t id : ready) {
    std::vector<std::string> values = ValuesOf(waiting_.at(id).keys);
    ended.push_back({TakeWaiter(id), grpc::Status::OK, std::move(values)});
  }
  return ended;
}

RendezvousStore::EndedWaiters RendezvousStore::EndWaitersOfOverAttempts() {
  std::vector<std::pair<uint64_t, int>> over;
  for (const auto& [id, waiter] : waiting_) {
    if (shut_down_ || waiter.attempt < dropped_below_) over.emplace_back(id, waiter.attempt);
  }
  EndedWaiters ended;
  for (const auto& [id, attempt] : over) {
    ended.push_back({TakeWaiter(id), grpc::Status(grpc::StatusCode::ABORTED,
                                                  absl::StrCat("attempt ", attempt, " of job ",
                                                               job_id_, " is over")),
                    {}});
  }
  return ended;
}

size_t RendezvousStore::WaitingCalls() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

int64_t RendezvousStore::WaitersWoken() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_woken_;
}

}  // namespace dslaunch
