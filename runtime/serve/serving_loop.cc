#include "runtime/serve/serving_loop.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

// A choice posted to the loop, not yet handed to the engine.
struct Posted {
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  size_t choice = 0;
};

// What HTTP threads and the loop thread share.
struct RequestStream::Mailbox {
  absl::Mutex mu;
  std::deque<Posted> submitted ABSL_GUARDED_BY(mu);
  std::vector<int64_t> cancelled ABSL_GUARDED_BY(mu);  // stream keys
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Status broken ABSL_GUARDED_BY(mu);    // a failed step, or Stop
  int64_t outstanding ABSL_GUARDED_BY(mu) = 0;  // choices submitted, not yet ended
  int64_t next_key ABSL_GUARDED_BY(mu) = 1;
  GenerationStats stats ABSL_GUARDED_BY(mu);
};

RequestStream::RequestStream(std::vector<int64_t> keys, std::shared_ptr<Mailbox> mailbox)
    : keys_(std::move(keys)), mailbox_(std::move(mailbox)), choices_(keys_.size()) {}

StreamUpdate RequestStream::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (!error_.ok()) return true;
    bool all_ended = true;
    for (const Choice& c : choices_) {
      if (!c.pending.tokens.empty() || (c.pending.finished != FinishReason::kNone && !c.end_reported)) return true;
      all_ended = all_ended && c.pending.finished != FinishReason::kNone;
    }
    return all_ended;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  StreamUpdate update;
  update.error = error_;
  for (Choice& c : choices_) {
    ChoiceUpdate& out = update.choices.emplace_back();
    out.tokens.swap(c.pending.tokens);
    out.logprobs.swap(c.pending.logprobs);
    out.top_logprobs.swap(c.pending.top_logprobs);
    out.prompt_logprobs.swap(c.pending.prompt_logprobs);
    out.finished = c.pending.finished;
    if (out.finished != FinishReason::kNone) c.end_reported = true;
  }
  return update;
}

void RequestStream::Cancel() {
  absl::MutexLock lock(&mailbox_->mu);
  mailbox_->cancelled.insert(mailbox_->cancelled.end(), keys_.begin(), keys_.end());
}

void RequestStream::CancelChoice(size_t choice) {
  absl::MutexLock lock(&mailbox_->mu);
  mailbox_->cancelled.push_back(keys_.at(choice));
}

void RequestStream::Deliver(size_t choice, GeneratedToken token) {
  absl::MutexLock lock(&mu_);
  ChoiceUpdate& pending = choices_[choice].pending;
  pending.tokens.push_back(token.token);
  pending.logprobs.push_back(token.logprob);
  if (!token.top_logprobs.empty()) pending.top_logprobs.push_back(std::move(token.top_logprobs));
  if (token.prompt_logprobs) pending.prompt_logprobs = std::move(token.prompt_logprobs);
}

void RequestStream::End(size_t choice, FinishReason reason) {
  absl::MutexLock lock(&mu_);
  FinishReason& finished = choices_[choice].pending.finished;
  if (finished == FinishReason::kNone) finished = reason;
}

void RequestStream::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = std::move(error);
}

// A choice the engine holds.
struct ServingLoop::Active {
  std::shared_ptr<RequestStream> stream;
  size_t choice = 0;
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
  std::deque<Posted> left;
  absl::Status why;
  {
    absl::MutexLock lock(&mailbox_->mu);
    left.swap(mailbox_->submitted);
    why = mailbox_->broken;
    mailbox_->outstanding -= static_cast<int64_t>(left.size());
  }
  for (Posted& posted : left) posted.stream->Fail(why);
}

absl::StatusOr<std::shared_ptr<RequestStream>> ServingLoop::Submit(GenerationRequest request) {
  std::vector<GenerationRequest> choices;
  choices.push_back(std::move(request));
  return Submit(std::move(choices));
}

absl::StatusOr<std::shared_ptr<RequestStream>> ServingLoop::Submit(std::vector<GenerationRequest> choices) {
  if (choices.empty()) return absl::InvalidArgumentError("n: a request needs at least one choice");
  const int64_t n = static_cast<int64_t>(choices.size());
  const int64_t capacity = this->capacity();
  if (n > capacity) {
    return absl::InvalidArgumentError(absl::StrCat("n: ", n, " choices are more than this server holds at once (",
                                                   "--max_sequences ", engine_->max_sequences(), " + --max_queue ",
                                                   options_.max_queue, ")"));
  }
  for (const GenerationRequest& request : choices) {
    if (absl::Status checked = engine_->CheckRequest(request); !checked.ok()) return checked;
  }
  absl::MutexLock lock(&mailbox_->mu);
  if (!mailbox_->broken.ok()) return absl::UnavailableError(mailbox_->broken.message());
  if (mailbox_->outstanding + n > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("the server is full: ", mailbox_->outstanding,
                                                     " requests running or waiting (--max_sequences ",
                                                     engine_->max_sequences(), " + --max_queue ", options_.max_queue,
                                                     ")", n > 1 ? absl::StrCat(", and this one has ", n, " choices") : "",
                                                     "; retry later"));
  }
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < n; ++i) keys.push_back(mailbox_->next_key++);
  auto stream = std::shared_ptr<RequestStream>(new RequestStream(std::move(keys), mailbox_));
  mailbox_->outstanding += n;
  for (size_t i = 0; i < choices.size(); ++i) mailbox_->submitted.push_back(Posted{std::move(choices[i]), stream, i});
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
    RequestStream& stream = *it->second.stream;
    if (error.ok()) {
      stream.End(it->second.choice, reason);
    } else {
      stream.Fail(std::move(error));
    }
    ids.erase(stream.keys_[it->second.choice]);
    active.erase(it);
    (void)engine_->TakeResult(id);
    absl::MutexLock lock(&mail.mu);
    --mail.outstanding;
  };
  absl::Status failure;
  while (true) {
    std::deque<Posted> submitted;
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
      for (const Posted& posted : submitted) {
        turn.submitted.emplace_back(posted.stream->keys_[posted.choice], posted.request);
      }
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
    for (Posted& posted : submitted) {
      const int64_t prompt_tokens = static_cast<int64_t>(posted.request.prompt.size());
      auto id = engine_->Submit(std::move(posted.request));
      if (!id.ok()) {  // CheckRequest passed: not expected, but never lost
        posted.stream->Fail(id.status());
        absl::MutexLock lock(&mail.mu);
        --mail.outstanding;
        continue;
      }
      if (metrics_ != nullptr) metrics_->PromptTokens(prompt_tokens);
      ids[posted.stream->keys_[posted.choice]] = *id;
      active[*id] = Active{posted.stream, posted.choice, absl::Now(), absl::InfinitePast(), 0};
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
      for (GeneratedToken& token : *step) {
        const int64_t id = token.request;
        const FinishReason finished = token.finished;
        auto it = active.find(id);
        if (it == active.end()) continue;
        Active& a = it->second;
        if (token.token >= 0) {  // -1: ended with no token (Note [Constrained output])
          if (metrics_ != nullptr) {
            if (a.tokens == 0) {
              metrics_->FirstToken(absl::ToDoubleSeconds(now - a.submitted));
            } else {
              metrics_->NextToken(absl::ToDoubleSeconds(now - a.last_token));
            }
          }
          ++a.tokens;
          a.last_token = now;
          a.stream->Deliver(a.choice, std::move(token));
        }
        if (finished != FinishReason::kNone) end(id, finished, absl::OkStatus());
      }
    }
    const GenerationStats stats = engine_->Stats();
    if (metrics_ != nullptr) metrics_->EngineState(stats);
    absl::MutexLock lock(&mail.mu);
    mail.stats = stats;
  }
  // Stopped or broken: every request posted or held ends with the reason.
  absl::Status why;
  std::deque<Posted> left;
  {
    absl::MutexLock lock(&mail.mu);
    if (!failure.ok()) mail.broken = failure;
    why = mail.broken;
    left.swap(mail.submitted);
    mail.outstanding -= static_cast<int64_t>(left.size());
  }
  for (Posted& posted : left) posted.stream->Fail(why);
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
