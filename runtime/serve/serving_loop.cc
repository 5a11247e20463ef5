#include "runtime/serve/serving_loop.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

// What HTTP threads and the loop thread share.
struct RequestStream::Mailbox {
  absl::Mutex mu;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestStream>>> submitted ABSL_GUARDED_BY(mu);
  std::vector<int64_t> cancelled ABSL_GUARDED_BY(mu);  // stream keys
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Status broken ABSL_GUARDED_BY(mu);    // a failed step, or Stop
  int64_t outstanding ABSL_GUARDED_BY(mu) = 0;  // submitted, not yet ended
  int64_t next_key ABSL_GUARDED_BY(mu) = 1;
  GenerationStats stats ABSL_GUARDED_BY(mu);
};

StreamUpdate RequestStream::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !tokens_.empty() || finished_ != FinishReason::kNone || !error_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  StreamUpdate update;
  update.tokens.swap(tokens_);
  update.finished = finished_;
  update.error = error_;
  return update;
}

void RequestStream::Cancel() {
  absl::MutexLock lock(&mailbox_->mu);
  mailbox_->cancelled.push_back(key_);
}

void RequestStream::Deliver(int64_t token) {
  absl::MutexLock lock(&mu_);
  tokens_.push_back(token);
}

void RequestStream::End(FinishReason reason, absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (finished_ != FinishReason::kNone || !error_.ok()) return;
  finished_ = reason;
  error_ = std::move(error);
}

// A request the engine holds.
struct ServingLoop::Active {
  std::shared_ptr<RequestStream> stream;
  absl::Time submitted;
  absl::Time last_token;
  int64_t tokens = 0;
};

ServingLoop::ServingLoop(std::unique_ptr<GenerationEngine> engine, const ServingLoopOptions& options,
                         ServingMetrics* metrics)
    : engine_(std::move(engine)),
      options_(options),
      metrics_(metrics),
      mailbox_(std::make_shared<RequestStream::Mailbox>()) {
  absl::MutexLock lock(&mailbox_->mu);
  mailbox_->stats = engine_->Stats();
  if (metrics_ != nullptr) metrics_->EngineState(mailbox_->stats);
}

ServingLoop::~ServingLoop() { Stop(); }

void ServingLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void ServingLoop::Stop() {
  absl::MutexLock stopping(&stop_mu_);
  {
    absl::MutexLock lock(&mailbox_->mu);
    mailbox_->stopping = true;
    if (mailbox_->broken.ok()) mailbox_->broken = absl::UnavailableError("the server is shutting down");
  }
  if (thread_.joinable()) thread_.join();
  // Requests the loop never took (it was not started, or stopped first).
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestStream>>> left;
  absl::Status why;
  {
    absl::MutexLock lock(&mailbox_->mu);
    left.swap(mailbox_->submitted);
    why = mailbox_->broken;
    mailbox_->outstanding -= static_cast<int64_t>(left.size());
  }
  for (auto& [request, stream] : left) stream->End(FinishReason::kNone, why);
}

absl::StatusOr<std::shared_ptr<RequestStream>> ServingLoop::Submit(GenerationRequest request) {
  if (absl::Status checked = engine_->CheckRequest(request); !checked.ok()) return checked;
  absl::MutexLock lock(&mailbox_->mu);
  if (!mailbox_->broken.ok()) return absl::UnavailableError(mailbox_->broken.message());
  const int64_t capacity = engine_->max_sequences() + options_.max_queue;
  if (mailbox_->outstanding >= capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("the server is full: ", mailbox_->outstanding,
                                                     " requests running or waiting (--max_sequences ",
                                                     engine_->max_sequences(), " + --max_queue ", options_.max_queue,
                                                     "); retry later"));
  }
  auto stream = std::shared_ptr<RequestStream>(new RequestStream(mailbox_->next_key++, mailbox_));
  ++mailbox_->outstanding;
  mailbox_->submitted.emplace_back(std::move(request), stream);
  return stream;
}

absl::Status ServingLoop::health() const {
  absl::MutexLock lock(&mailbox_->mu);
  return mailbox_->broken;
}

GenerationStats ServingLoop::Stats() const {
  absl::MutexLock lock(&mailbox_->mu);
  return mailbox_->stats;
}

void ServingLoop::Run() {
  RequestStream::Mailbox& mail = *mailbox_;
  std::map<int64_t, Active> active;  // by engine id
  std::map<int64_t, int64_t> ids;    // stream key -> engine id
  auto end = [&](int64_t id, FinishReason reason, absl::Status error) {
    auto it = active.find(id);
    const absl::Time now = absl::Now();
    if (metrics_ != nullptr) metrics_->RequestEnded(reason, !error.ok(), absl::ToDoubleSeconds(now - it->second.submitted));
    it->second.stream->End(reason, std::move(error));
    ids.erase(it->second.stream->key_);
    active.erase(it);
    (void)engine_->TakeResult(id);
    absl::MutexLock lock(&mail.mu);
    --mail.outstanding;
  };
  absl::Status failure;
  while (true) {
    std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestStream>>> submitted;
    std::vector<int64_t> cancelled;
    if (options_.on_turn && !engine_->Idle()) options_.on_turn();
    {
      absl::MutexLock lock(&mail.mu);
      const bool idle = engine_->Idle();
      auto has_work = [&mail, idle]() ABSL_SHARED_LOCKS_REQUIRED(mail.mu) {
        return mail.stopping || !mail.submitted.empty() || !mail.cancelled.empty() || !idle;
      };
      if (options_.publisher != nullptr) {
        mail.mu.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_turn);
      } else {
        mail.mu.Await(absl::Condition(&has_work));
      }
      if (mail.stopping) break;
      submitted.swap(mail.submitted);
      cancelled.swap(mail.cancelled);
    }
    if (options_.publisher != nullptr) {
      // Note [Tensor-parallel serving]: the other ranks apply this turn as is.
      ServingTurn turn;
      for (const auto& [request, stream] : submitted) turn.submitted.emplace_back(stream->key_, request);
      turn.cancelled = cancelled;
      if (absl::Status published = options_.publisher->Publish(turn); !published.ok()) {
        failure = absl::UnavailableError(
            absl::StrCat("the tensor-parallel ranks cannot be reached: ", published.message()));
        // The turn never reached the engine: its requests end with the failure.
        absl::MutexLock lock(&mail.mu);
        for (auto& item : submitted) mail.submitted.push_front(std::move(item));
        break;
      }
    }
    for (auto& [request, stream] : submitted) {
      const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
      auto id = engine_->Submit(std::move(request));
      if (!id.ok()) {  // CheckRequest passed: not expected, but never lost
        stream->End(FinishReason::kNone, id.status());
        absl::MutexLock lock(&mail.mu);
        --mail.outstanding;
        continue;
      }
      if (metrics_ != nullptr) metrics_->PromptTokens(prompt_tokens);
      ids[stream->key_] = *id;
      active[*id] = Active{stream, absl::Now(), absl::InfinitePast(), 0};
    }
    for (int64_t key : cancelled) {
      auto it = ids.find(key);
      if (it == ids.end()) continue;  // ended already
      const int64_t id = it->second;
      (void)engine_->Cancel(id);
      end(id, FinishReason::kCancelled, absl::OkStatus());
    }
    if (!engine_->Idle()) {
      auto step = engine_->Step();
      if (!step.ok()) {
        failure = absl::UnavailableError(absl::StrCat("the generation engine failed: ", step.status().message()));
        break;
      }
      const absl::Time now = absl::Now();
      for (const GeneratedToken& token : *step) {
        auto it = active.find(token.request);
        if (it == active.end()) continue;
        Active& a = it->second;
        if (metrics_ != nullptr) {
          if (a.tokens == 0) {
            metrics_->FirstToken(absl::ToDoubleSeconds(now - a.submitted));
          } else {
            metrics_->NextToken(absl::ToDoubleSeconds(now - a.last_token));
          }
        }
        ++a.tokens;
        a.last_token = now;
        a.stream->Deliver(token.token);
        if (token.finished != FinishReason::kNone) end(token.request, token.finished, absl::OkStatus());
      }
    }
    const GenerationStats stats = engine_->Stats();
    if (metrics_ != nullptr) metrics_->EngineState(stats);
    absl::MutexLock lock(&mail.mu);
    mail.stats = stats;
  }
  // Stopped or broken: every request posted or held ends with the reason.
  absl::Status why;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestStream>>> left;
  {
    absl::MutexLock lock(&mail.mu);
    if (!failure.ok()) mail.broken = failure;
    why = mail.broken;
    left.swap(mail.submitted);
    mail.outstanding -= static_cast<int64_t>(left.size());
  }
  for (auto& [request, stream] : left) stream->End(FinishReason::kNone, why);
  while (!active.empty()) {
    const int64_t id = active.begin()->first;
    (void)engine_->Cancel(id);
    end(id, FinishReason::kNone, why);
  }
  if (options_.publisher != nullptr) {
    ServingTurn stop;
    stop.stop = true;
    (void)options_.publisher->Publish(stop);  // the followers return; a broken group cannot be told
  }
}

}  // namespace dslaunch::runtime
