// Note [Tensor-parallel serving]: turns survive the wire bit for bit, and a
// serving loop on rank 0 with a follower on rank 1 (a Llama split over 2
// Gloo ranks on threads) answers concurrent requests with what the whole
// model answers alone; a cancellation and Stop reach the follower.
#include "runtime/serve/serving_turns.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/serve/serving_loop.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

TEST(ServingTurnsTest, ATurnSurvivesTheWireBitForBit) {
  ServingTurn turn;
  GenerationRequest request;
  request.prompt = {5, 0, 9};
  request.max_new_tokens = 12;
  request.sampling.greedy = false;
  request.sampling.temperature = 0.1 + 0.2;  // not a short decimal
  request.sampling.top_k = 7;
  request.sampling.top_p = 0.9;
  request.sampling.repetition_penalty = 1.3;
  request.sampling.seed = ~uint64_t{0} - 5;
  request.sampling.top_logprobs = 6;
  request.prompt_logprobs = true;
  request.stop_tokens = {2, 31};
  // Note [Constrained output]: choices of every length around a word's 8 bytes.
  request.constraint = OutputConstraint::Choice(std::vector<std::string>{"a", "12345678", "123456789", "caf\xC3\xA9"});
  GenerationRequest json{{1}, 1, {}, {}};
  json.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  json.constraint.schema = R"({"type":"object","properties":{"caf\u00e9":{"const":"\u20ac"}}})";
  json.constraint.before = "<tool_call>\n";
  json.constraint.after = "\n</tool_call>";
  // Note [Structural tags]: structures and triggers.
  GenerationRequest tag{{1}, 1, {}, {}};
  tag.constraint = OutputConstraint::StructuralTag(
      {{"<f=a>", R"({"type":"object"})", "</f>"}, {"<f=bcdefghij>", "{}", "</f>\n"}}, {"<f=", "<g"});
  // Note [JSON or text].
  GenerationRequest either{{1}, 1, {}, {}};
  either.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  either.constraint.schema = R"({"type":"object"})";
  either.constraint.or_text = true;
  turn.submitted = {{17, request}, {18, json}, {19, tag}, {20, either}};
  turn.cancelled = {3, 17};
  auto back = DecodeTurn(EncodeTurn(turn));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->submitted.size(), 4u);
  const GenerationRequest& got = back->submitted[0].second;
  EXPECT_EQ(back->submitted[0].first, 17);
  EXPECT_EQ(got.prompt, request.prompt);
  EXPECT_EQ(got.max_new_tokens, 12);
  EXPECT_FALSE(got.sampling.greedy);
  EXPECT_EQ(got.sampling.temperature, request.sampling.temperature);
  EXPECT_EQ(got.sampling.top_k, 7);
  EXPECT_EQ(got.sampling.top_p, 0.9);
  EXPECT_EQ(got.sampling.repetition_penalty, 1.3);
  EXPECT_EQ(got.sampling.seed, request.sampling.seed);
  EXPECT_EQ(got.sampling.top_logprobs, 6);
  EXPECT_TRUE(got.prompt_logprobs);
  EXPECT_FALSE(back->submitted[1].second.prompt_logprobs);
  EXPECT_EQ(got.stop_tokens, request.stop_tokens);
  EXPECT_EQ(got.constraint, request.constraint);
  EXPECT_EQ(back->submitted[1].second.constraint, json.constraint);
  EXPECT_EQ(back->submitted[2].second.constraint, tag.constraint);
  EXPECT_EQ(back->submitted[2].second.constraint.structures.size(), 2u);
  EXPECT_EQ(back->submitted[3].second.constraint, either.constraint);
  EXPECT_TRUE(back->submitted[3].second.constraint.or_text);
  EXPECT_EQ(back->cancelled, turn.cancelled);
  EXPECT_FALSE(back->stop);

  std::vector<int64_t> words = EncodeTurn(turn);
  words.pop_back();
  EXPECT_EQ(DecodeTurn(words).status().code(), absl::StatusCode::kDataLoss);
  words = EncodeTurn(turn);
  words.push_back(0);
  EXPECT_EQ(DecodeTurn(words).status().code(), absl::StatusCode::kDataLoss);
  words = EncodeTurn(turn);
  words[2] = 1 << 30;  // more requests than words
  EXPECT_EQ(DecodeTurn(words).status().code(), absl::StatusCode::kDataLoss);
}

LlamaOptions SplitLlama() { return ::dslaunch::runtime::testing::GenerationTestLlama(8, 2, 4, 37); }

GenerationRequest SplitRequest(int64_t i) {
  GenerationRequest request;
  for (int64_t p = 0; p < 2 + i % 5; ++p) request.prompt.push_back((p * 3 + i * 7 + 1) % 37);
  request.max_new_tokens = 5 + i % 4;
  request.sampling.greedy = i % 2 == 0;
  request.sampling.temperature = 0.8;
  request.sampling.seed = static_cast<uint64_t>(i);
  return request;
}

std::unique_ptr<GenerationEngine> SplitEngine(const LlamaOptions& options) {
  Llama model(options, /*seed=*/9);
  model->eval();
  GenerationEngineOptions engine_options;
  engine_options.max_sequences = 3;
  engine_options.max_tokens_per_step = 8;
  engine_options.block_size = 4;
  engine_options.cache_positions = 512;
  auto engine = GenerationEngine::Create(model, engine_options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

TEST(ServingTurnsTest, AFollowerKeepsInStepWithTheServingRank) {
  torch::NoGradGuard no_grad;
  constexpr int kRequests = 10;
  std::vector<std::vector<int64_t>> alone;
  {
    auto engine = SplitEngine(SplitLlama());
    for (int i = 0; i < kRequests; ++i) alone.push_back((*engine->GenerateAll({SplitRequest(i)}))[0].tokens);
  }
  std::vector<std::vector<int64_t>> served(kRequests);
  absl::Status followed = absl::UnknownError("the follower did not return");
  testing::InProcessStore store;
  store.RunRanks(2, [&](int rank, Communicator& comm) {
    torch::NoGradGuard guard;
    LlamaOptions options = SplitLlama();
    options.tensor_parallel = TensorParallelGroup{&comm, rank, 2, false};
    auto engine = SplitEngine(options);
    if (rank == 1) {
      followed = FollowServingTurns(*engine, comm, torch::kCPU);
      return;
    }
    TurnPublisher publisher(&comm, torch::kCPU);
    ServingLoopOptions loop_options;
    loop_options.publisher = &publisher;
    loop_options.idle_turn = absl::Milliseconds(20);  // empty turns happen too
    ServingLoop loop(std::move(engine), loop_options, nullptr);
    loop.Start();
    // One request cancelled after its first token.
    GenerationRequest long_request = SplitRequest(0);
    long_request.max_new_tokens = 60;
    auto cancelled = loop.Submit(long_request);
    ASSERT_TRUE(cancelled.ok());
    ASSERT_FALSE((*cancelled)->Wait(absl::InfiniteFuture()).choices[0].tokens.empty());
    (*cancelled)->Cancel();
    std::vector<std::thread> clients;
    for (int t = 0; t < 2; ++t) {
      clients.emplace_back([&, t] {
        torch::NoGradGuard inner;
        for (int i = t; i < kRequests; i += 2) {
          auto stream = loop.Submit(SplitRequest(i));
          ASSERT_TRUE(stream.ok()) << stream.status();
          StreamUpdate update;
          while (!update.ended()) {
            update = (*stream)->Wait(absl::InfiniteFuture());
            served[i].insert(served[i].end(), update.choices[0].tokens.begin(), update.choices[0].tokens.end());
          }
          EXPECT_TRUE(update.error.ok()) << update.error;
        }
      });
    }
    for (std::thread& client : clients) client.join();
    StreamUpdate end;
    while (!end.ended()) end = (*cancelled)->Wait(absl::InfiniteFuture());
    EXPECT_EQ(end.choices[0].finished, FinishReason::kCancelled);
    loop.Stop();
  });
  EXPECT_TRUE(followed.ok()) << followed;
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(served[i], alone[i]) << "request " << i;
}

}  // namespace
}  // namespace dslaunch::runtime
