// Note [The serving loop]: requests from many threads get what each gets
// alone; a full server refuses at once; a cancelled request's blocks go back;
// Stop ends everything in flight.
#include "runtime/serve/serving_loop.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

Llama TinyModel() {
  Llama model(::dslaunch::runtime::testing::GenerationTestLlama(), /*seed=*/5);
  model->eval();
  return model;
}

GenerationRequest Request(int64_t i) {
  GenerationRequest request;
  for (int64_t p = 0; p < 3 + i % 7; ++p) request.prompt.push_back((p * 5 + i * 3 + 1) % 64);
  request.max_new_tokens = 4 + i % 5;
  request.sampling.greedy = i % 2 == 0;
  request.sampling.temperature = 0.8;
  request.sampling.seed = static_cast<uint64_t>(i);
  request.stop_tokens = {static_cast<int64_t>(i % 64)};
  return request;
}

std::unique_ptr<GenerationEngine> Engine(Llama model, int64_t max_sequences) {
  GenerationEngineOptions options;
  options.max_sequences = max_sequences;
  options.max_tokens_per_step = 16;
  options.block_size = 4;
  options.cache_positions = 256;
  auto engine = GenerationEngine::Create(model, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

// Log-probabilities of the same tokens batched and alone: equal up to the
// order of sums (LibTorch 2.x's CPU kernels pick their blocking by the batch's
// rows, so the last bits may differ; LibTorch 1.13's happen to agree), as
// generation_engine_test.cc compares them.
void ExpectLogprobsNear(const std::vector<double>& got, const std::vector<double>& alone) {
  ASSERT_EQ(got.size(), alone.size());
  for (size_t t = 0; t < alone.size(); ++t) EXPECT_NEAR(got[t], alone[t], 1e-5) << "token " << t;
}

void ExpectTopLogprobsNear(const std::vector<std::vector<TokenLogprob>>& got,
                           const std::vector<std::vector<TokenLogprob>>& alone) {
  ASSERT_EQ(got.size(), alone.size());
  for (size_t t = 0; t < alone.size(); ++t) {
    ASSERT_EQ(got[t].size(), alone[t].size()) << "token " << t;
    for (size_t k = 0; k < alone[t].size(); ++k) {
      EXPECT_EQ(got[t][k].id, alone[t][k].id) << "token " << t << " alternative " << k;
      EXPECT_NEAR(got[t][k].logprob, alone[t][k].logprob, 1e-5) << "token " << t << " alternative " << k;
    }
  }
}

// Everything a stream delivers until its end, each choice's joined.
StreamUpdate Drain(RequestStream& stream) {
  StreamUpdate all;
  all.choices.resize(stream.choices());
  while (!all.ended()) {
    StreamUpdate update = stream.Wait(absl::InfiniteFuture());
    EXPECT_EQ(update.choices.size(), all.choices.size());
    for (size_t c = 0; c < update.choices.size(); ++c) {
      ChoiceUpdate& to = all.choices[c];
      const ChoiceUpdate& from = update.choices[c];
      to.tokens.insert(to.tokens.end(), from.tokens.begin(), from.tokens.end());
      to.logprobs.insert(to.logprobs.end(), from.logprobs.begin(), from.logprobs.end());
      to.top_logprobs.insert(to.top_logprobs.end(), from.top_logprobs.begin(), from.top_logprobs.end());
      to.finished = from.finished;
    }
    all.error = update.error;
  }
  return all;
}

TEST(ServingLoopTest, RequestsFromManyThreadsGetWhatEachGetsAlone) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  constexpr int kRequests = 24;
  std::vector<GenerationResult> alone;
  {
    auto engine = Engine(model, 1);
    for (int i = 0; i < kRequests; ++i) {
      auto result = engine->GenerateAll({Request(i)});
      ASSERT_TRUE(result.ok()) << result.status();
      alone.push_back((*result)[0]);
    }
  }
  ServingMetrics metrics;
  ServingLoop loop(Engine(model, 5), ServingLoopOptions{}, &metrics);
  loop.Start();
  std::vector<StreamUpdate> got(kRequests);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      torch::NoGradGuard guard;
      for (int i = t; i < kRequests; i += 4) {
        auto stream = loop.Submit(Request(i));
        ASSERT_TRUE(stream.ok()) << stream.status();
        got[i] = Drain(**stream);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(got[i].error.ok()) << got[i].error;
    EXPECT_EQ(got[i].choices[0].tokens, alone[i].tokens);
    ExpectLogprobsNear(got[i].choices[0].logprobs, alone[i].logprobs);
    EXPECT_EQ(got[i].choices[0].finished, alone[i].finished);
  }
  loop.Stop();
  const GenerationStats stats = loop.Stats();
  EXPECT_EQ(stats.running + stats.waiting, 0);
  EXPECT_EQ(stats.cache_free_blocks, stats.cache_blocks);
  const std::string text = metrics.Text();
  EXPECT_THAT(text, HasSubstr("dsserve_time_to_first_token_seconds_count 24"));
  int64_t generated = 0;
  for (const GenerationResult& result : alone) generated += static_cast<int64_t>(result.tokens.size());
  EXPECT_THAT(text, HasSubstr(absl::StrCat("dsserve_generation_tokens_total ", generated)));
}

TEST(ServingLoopTest, AFullServerRefusesAtOnceAndStopEndsWhatIsQueued) {
  ServingLoop loop(Engine(TinyModel(), 2), ServingLoopOptions{/*max_queue=*/1}, nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    auto stream = loop.Submit(Request(i));
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(*stream);
  }
  auto refused = loop.Submit(Request(3));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max_sequences 2 + --max_queue 1"));
  GenerationRequest bad = Request(4);
  bad.prompt[0] = 64;
  EXPECT_EQ(loop.Submit(bad).status().code(), absl::StatusCode::kInvalidArgument) << "checked before queueing";

  loop.Stop();  // never started: the queued requests end, none is left waiting
  for (auto& stream : streams) {
    StreamUpdate end = Drain(*stream);
    EXPECT_EQ(end.error.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(end.error.message()), HasSubstr("shutting down"));
  }
  EXPECT_EQ(loop.Submit(Request(0)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(loop.health().code(), absl::StatusCode::kUnavailable);
}

TEST(ServingLoopTest, ACancelledRequestEndsAndItsBlocksGoBack) {
  torch::NoGradGuard no_grad;
  ServingMetrics metrics;
  // The loop is held before its second step until the test has cancelled.
  absl::Notification cancel_sent;
  int turns = 0;
  ServingLoopOptions options;
  options.on_turn = [&] {
    if (++turns == 1) cancel_sent.WaitForNotification();  // before the running request's second step
  };
  ServingLoop loop(Engine(TinyModel(), 2), options, &metrics);
  EXPECT_TRUE(loop.health().ok());
  GenerationRequest request = Request(0);
  request.max_new_tokens = 50;
  request.stop_tokens.clear();
  // Cancelled while waiting (the loop not started yet): no tokens.
  auto waiting = loop.Submit(request);
  ASSERT_TRUE(waiting.ok());
  (*waiting)->Cancel();
  loop.Start();
  StreamUpdate never_ran = Drain(**waiting);
  EXPECT_EQ(never_ran.choices[0].finished, FinishReason::kCancelled);
  EXPECT_TRUE(never_ran.choices[0].tokens.empty());
  // Cancelled while running: the one token of its first step, then the end.
  auto running = loop.Submit(request);
  ASSERT_TRUE(running.ok());
  StreamUpdate first = (*running)->Wait(absl::InfiniteFuture());
  ASSERT_EQ(first.choices[0].tokens.size(), 1u);
  (*running)->Cancel();
  cancel_sent.Notify();
  StreamUpdate end = Drain(**running);
  EXPECT_EQ(end.choices[0].finished, FinishReason::kCancelled);
  EXPECT_TRUE(end.error.ok());
  EXPECT_TRUE(end.choices[0].tokens.empty());
  (*running)->Cancel();  // harmless after the end
  loop.Stop();
  const GenerationStats stats = loop.Stats();
  EXPECT_EQ(stats.cache_free_blocks, stats.cache_blocks);
  EXPECT_THAT(metrics.Text(), HasSubstr("dsserve_requests_total{finish_reason=\"cancelled\"} 2"));
}

TEST(ServingLoopTest, ARequestOfSeveralChoicesGetsEachAloneAndEndsWhenAllHave) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  std::vector<GenerationRequest> choices;
  for (int c = 0; c < 3; ++c) {
    GenerationRequest request = Request(1);  // sampled
    request.sampling.seed = 40 + c;
    request.sampling.top_logprobs = 2;
    request.max_new_tokens = 6 + c;
    request.stop_tokens.clear();
    choices.push_back(request);
  }
  std::vector<GenerationResult> alone;
  {
    auto engine = Engine(model, 1);
    for (const GenerationRequest& request : choices) alone.push_back((*engine->GenerateAll({request}))[0]);
  }
  ASSERT_NE(alone[0].tokens, alone[1].tokens) << "the seeds should give different choices";
  ServingMetrics metrics;
  ServingLoopOptions options;
  options.max_queue = 1;
  ServingLoop loop(Engine(model, 2), options, &metrics);
  // More choices than the server ever holds: refused naming n, nothing queued.
  auto too_many = loop.Submit(std::vector<GenerationRequest>(4, choices[0]));
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_many.status().message()), HasSubstr("n: 4 choices"));
  loop.Start();
  auto stream = loop.Submit(choices);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ((*stream)->choices(), 3u);
  const StreamUpdate all = Drain(**stream);
  ASSERT_TRUE(all.error.ok()) << all.error;
  for (size_t c = 0; c < 3; ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(all.choices[c].tokens, alone[c].tokens);
    ExpectLogprobsNear(all.choices[c].logprobs, alone[c].logprobs);
    ExpectTopLogprobsNear(all.choices[c].top_logprobs, alone[c].top_logprobs);
    EXPECT_EQ(all.choices[c].finished, FinishReason::kLength);
  }
  // One choice cancelled (a stop string ended it): the others go on to their end.
  std::vector<GenerationRequest> long_choices = {choices[0], choices[1]};
  for (GenerationRequest& request : long_choices) request.max_new_tokens = 40;
  auto second = loop.Submit(long_choices);
  ASSERT_TRUE(second.ok()) << second.status();
  (*second)->CancelChoice(0);
  const StreamUpdate ended = Drain(**second);
  EXPECT_TRUE(ended.error.ok()) << ended.error;
  EXPECT_EQ(ended.choices[0].finished, FinishReason::kCancelled);
  EXPECT_EQ(ended.choices[1].finished, FinishReason::kLength);
  EXPECT_EQ(ended.choices[1].tokens.size(), 40u);
  loop.Stop();
  const GenerationStats stats = loop.Stats();
  EXPECT_EQ(stats.cache_free_blocks, stats.cache_blocks);
}

}  // namespace
}  // namespace dslaunch::runtime
