// The continuous-batching engine against the plainest generation there is:
// the whole sequence run again for every new token. Cached decoding gives
// the same tokens; many requests batched, joining between steps, with
// prompts split across steps and the cache too small for all of them at
// once, give each request exactly what it gets alone.
#include "runtime/generate/generation_engine.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

LlamaOptions Tiny(int64_t kv_heads, bool bias = false) {
  LlamaOptions options = ::dslaunch::runtime::testing::GenerationTestLlama(/*heads=*/4, kv_heads);
  options.qkv_bias = bias;
  return options;
}

Llama Model(const LlamaOptions& options) {
  Llama model(options, /*seed=*/11);
  if (options.qkv_bias) {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (item.key().find("bias") != std::string::npos) item.value().normal_(0.0, 0.3);
    }
  }
  model->eval();
  return model;
}

// Greedy, recomputing every position each time (what dsgen did).
std::vector<int64_t> Recomputed(Llama model, std::vector<int64_t> sequence, int64_t new_tokens,
                                std::vector<double>* logprobs) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < new_tokens; ++i) {
    torch::Tensor logits = model->forward(torch::tensor(sequence, torch::kLong).view({1, -1}))[0][-1];
    const int64_t next = logits.argmax().item<int64_t>();
    logprobs->push_back(torch::log_softmax(logits.to(torch::kDouble), 0)[next].item<double>());
    out.push_back(next);
    sequence.push_back(next);
  }
  return out;
}

std::vector<int64_t> Prompt(int64_t length, int64_t salt) {
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < length; ++i) prompt.push_back((i * 7 + salt * 13 + 3) % 64);
  return prompt;
}

TEST(GenerationEngineTest, CachedGreedyEqualsRecomputingTheWholeSequence) {
  for (auto [kv_heads, bias, multiple] :
       {std::tuple{4, false, 1}, std::tuple{2, false, 128}, std::tuple{1, true, 5}}) {
    SCOPED_TRACE(::testing::Message() << "kv_heads " << kv_heads << " bias " << bias << " key_length_multiple "
                                    << multiple);
    Llama model = Model(Tiny(kv_heads, bias));
    std::vector<double> expected_logprobs;
    const std::vector<int64_t> expected = Recomputed(model, Prompt(7, 1), 20, &expected_logprobs);
    GenerationEngineOptions options;
    options.block_size = 4;  // the sequence spans several blocks
    options.max_sequences = 2;
    options.max_tokens_per_step = 3;  // the prompt goes in over three steps
    options.key_length_multiple = multiple;
    auto engine = GenerationEngine::Create(model, options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    // With top_logprobs the host walks the logits; without, the token and its
    // log-probability are chosen where the logits are (Note [Choosing on the device]).
    for (int64_t top_logprobs : {3, 0}) {
      SCOPED_TRACE(::testing::Message() << "top_logprobs " << top_logprobs);
      GenerationRequest request;
      request.prompt = Prompt(7, 1);
      request.max_new_tokens = 20;
      request.sampling.top_logprobs = top_logprobs;
      auto results = (*engine)->GenerateAll({request});
      ASSERT_TRUE(results.ok()) << results.status();
      EXPECT_EQ((*results)[0].tokens, expected);
      ASSERT_EQ((*results)[0].logprobs.size(), expected_logprobs.size());
      ASSERT_EQ((*results)[0].top_logprobs.size(), top_logprobs > 0 ? expected_logprobs.size() : 0u);
      for (size_t i = 0; i < expected_logprobs.size(); ++i) {
        EXPECT_NEAR((*results)[0].logprobs[i], expected_logprobs[i], 1e-5) << "token " << i;
        if (top_logprobs == 0) continue;
        // Greedy without a penalty: the most probable token is the one chosen.
        const std::vector<TokenLogprob>& top = (*results)[0].top_logprobs[i];
        ASSERT_EQ(top.size(), 3u);
        EXPECT_EQ(top[0].id, expected[i]) << "token " << i;
        EXPECT_EQ(top[0].logprob, (*results)[0].logprobs[i]) << "token " << i;
        EXPECT_GE(top[1].logprob, top[2].logprob);
      }
      EXPECT_EQ((*results)[0].finished, FinishReason::kLength);
    }
  }
}

// Note [Prompt log-probabilities]: each prompt token scored by the
// positions before it, over prompts split across steps, beside requests
// that do not ask; the tokens generated are unchanged.
TEST(GenerationEngineTest, PromptLogprobsAreTheWholeForwardsScores) {
  torch::NoGradGuard no_grad;
  Llama model = Model(Tiny(2));
  GenerationEngineOptions options;
  options.block_size = 4;
  options.max_sequences = 3;
  options.max_tokens_per_step = 5;  // prompts over several steps, some pieces of one token
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<GenerationRequest> requests;
  for (int64_t i = 0; i < 3; ++i) {
    GenerationRequest request;
    request.prompt = Prompt(9 + 3 * i, i);
    request.max_new_tokens = 3;
    request.prompt_logprobs = i != 1;
    request.sampling.top_logprobs = i == 2 ? 0 : 2;
    requests.push_back(request);
  }
  auto results = (*engine)->GenerateAll(requests);
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<int64_t>& prompt = requests[i].prompt;
    std::vector<double> unused;
    EXPECT_EQ((*results)[i].tokens, Recomputed(model, prompt, 3, &unused));
    const PromptLogprobs& scored = (*results)[i].prompt_logprobs;
    if (!requests[i].prompt_logprobs) {
      EXPECT_TRUE(scored.logprobs.empty());
      continue;
    }
    const torch::Tensor expected =
        torch::log_softmax(model->forward(torch::tensor(prompt, torch::kLong).view({1, -1}))[0].to(torch::kDouble), -1);
    ASSERT_EQ(scored.logprobs.size(), prompt.size() - 1);
    ASSERT_EQ(scored.top.size(), requests[i].sampling.top_logprobs > 0 ? prompt.size() - 1 : 0u);
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      EXPECT_NEAR(scored.logprobs[p], expected[p][prompt[p + 1]].item<double>(), 1e-5) << "prompt token " << p + 1;
      if (!scored.top.empty()) {
        ASSERT_EQ(scored.top[p].size(), 2u);
        EXPECT_EQ(scored.top[p][0].id, expected[p].argmax().item<int64_t>()) << "prompt token " << p + 1;
      }
    }
  }
}

std::vector<GenerationRequest> Mixed() {
  std::vector<GenerationRequest> requests;
  const int64_t lengths[] = {1, 3, 9, 17, 5, 11};
  for (int64_t i = 0; i < 6; ++i) {
    GenerationRequest request;
    request.prompt = Prompt(lengths[i], i);
    request.max_new_tokens = 6 + i;
    if (i % 2 == 1) {
      request.sampling.greedy = false;
      request.sampling.temperature = 0.8;
      request.sampling.top_k = i == 3 ? 10 : 0;
      request.sampling.top_p = i == 5 ? 0.9 : 1.0;
      request.sampling.seed = 100 + i;
    }
    if (i == 2) request.sampling.repetition_penalty = 1.3;
    requests.push_back(request);
  }
  return requests;
}

TEST(GenerationEngineTest, BatchedRequestsJoiningBetweenStepsEqualEachAlone) {
  Llama model = Model(Tiny(2));
  std::vector<GenerationResult> alone;
  for (const GenerationRequest& request : Mixed()) {
    GenerationEngineOptions options;
    options.max_sequences = 1;
    options.max_tokens_per_step = 64;
    auto engine = GenerationEngine::Create(model, options);
    ASSERT_TRUE(engine.ok());
    auto result = (*engine)->GenerateAll({request});
    ASSERT_TRUE(result.ok()) << result.status();
    alone.push_back((*result)[0]);
  }
  // One request stops at a token it is known to produce.
  std::vector<GenerationRequest> requests = Mixed();
  requests[4].stop_tokens = {alone[4].tokens[2]};

  GenerationEngineOptions options;
  options.max_sequences = 3;
  options.max_tokens_per_step = 5;  // long prompts go in piece by piece beside decodes
  options.block_size = 4;
  options.cache_positions = 64;  // not every request fits at once: some wait for blocks
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok());
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*(*engine)->Submit(requests[i]));
  int64_t steps = 0, most_running = 0, waited = 0;
  std::map<int64_t, std::vector<int64_t>> streamed;
  while (!(*engine)->Idle() || ids.size() < requests.size()) {
    // The rest arrive while the first ones run.
    if (steps == 2 || steps == 5 || steps == 6) ids.push_back(*(*engine)->Submit(requests[ids.size()]));
    auto produced = (*engine)->Step();
    ASSERT_TRUE(produced.ok()) << produced.status();
    for (const GeneratedToken& token : *produced) streamed[token.request].push_back(token.token);
    const GenerationStats stats = (*engine)->Stats();
    EXPECT_LE(stats.last_step_tokens, 5);
    most_running = std::max(most_running, stats.running);
    if (stats.waiting > 0 && stats.running > 0) ++waited;
    ASSERT_LT(++steps, 500);
  }
  EXPECT_EQ(most_running, 3);
  EXPECT_GT(waited, 0) << "the cache never made a request wait";
  for (size_t i = 0; i < requests.size(); ++i) {
    auto result = (*engine)->TakeResult(ids[i]);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(streamed[ids[i]], result->tokens) << "request " << i;
    if (i == 4) {
      EXPECT_EQ(result->tokens, std::vector<int64_t>(alone[4].tokens.begin(), alone[4].tokens.begin() + 3));
      EXPECT_EQ(result->finished, FinishReason::kStop);
      continue;
    }
    EXPECT_EQ(result->tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(result->finished, FinishReason::kLength);
    for (size_t t = 0; t < alone[i].logprobs.size(); ++t) {
      EXPECT_NEAR(result->logprobs[t], alone[i].logprobs[t], 1e-5) << "request " << i << " token " << t;
    }
  }
  const GenerationStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.cache_free_blocks, stats.cache_blocks) << "blocks still held after every request ended";
}

// Note [Growing reservations]: a cache of 8 blocks holds each request alone
// (the longest takes 7) but not three at once once they grow: the latest
// admitted is preempted and computed again when it comes back, and every
// request's tokens are what it gets alone, its log-probabilities and its
// prompt's (scored once) to rounding; no block is held after.
TEST(GenerationEngineTest, RequestsPreemptedForBlocksGoOnWhereTheyStopped) {
  Llama model = Model(Tiny(2));
  std::vector<GenerationRequest> requests = Mixed();
  for (GenerationRequest& request : requests) request.prompt_logprobs = true;
  std::vector<GenerationResult> alone;
  for (const GenerationRequest& request : requests) {
    GenerationEngineOptions options;
    options.max_sequences = 1;
    auto engine = GenerationEngine::Create(model, options);
    ASSERT_TRUE(engine.ok());
    auto result = (*engine)->GenerateAll({request});
    ASSERT_TRUE(result.ok()) << result.status();
    alone.push_back((*result)[0]);
  }
  GenerationEngineOptions options;
  options.max_sequences = 6;
  options.max_tokens_per_step = 16;
  options.block_size = 4;
  options.cache_positions = 32;
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok());
  std::vector<int64_t> ids;
  for (const GenerationRequest& request : requests) ids.push_back(*(*engine)->Submit(request));
  std::map<int64_t, std::vector<int64_t>> streamed;
  for (int64_t steps = 0; !(*engine)->Idle(); ++steps) {
    ASSERT_LT(steps, 1000);
    auto produced = (*engine)->Step();
    ASSERT_TRUE(produced.ok()) << produced.status();
    for (const GeneratedToken& token : *produced) streamed[token.request].push_back(token.token);
  }
  const GenerationStats stats = (*engine)->Stats();
  EXPECT_GT(stats.preemptions, 0) << "the cache never ran out";
  int64_t prompt_tokens = 0;
  for (const GenerationRequest& request : requests) prompt_tokens += static_cast<int64_t>(request.prompt.size());
  EXPECT_EQ(stats.prompt_tokens, prompt_tokens) << "a prompt counted again when it was computed again";
  EXPECT_EQ(stats.cache_free_blocks, stats.cache_blocks);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto result = (*engine)->TakeResult(ids[i]);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(streamed[ids[i]], result->tokens) << "request " << i;
    ASSERT_EQ(result->logprobs.size(), alone[i].logprobs.size());
    for (size_t k = 0; k < alone[i].logprobs.size(); ++k) {
      EXPECT_NEAR(result->logprobs[k], alone[i].logprobs[k], 1e-5) << "request " << i << " token " << k;
    }
    ASSERT_EQ(result->prompt_logprobs.logprobs.size(), alone[i].prompt_logprobs.logprobs.size()) << "request " << i;
    for (size_t k = 0; k < alone[i].prompt_logprobs.logprobs.size(); ++k) {
      EXPECT_NEAR(result->prompt_logprobs.logprobs[k], alone[i].prompt_logprobs.logprobs[k], 1e-5);
    }
  }
}

TEST(GenerationEngineTest, ACancelledRequestFreesItsBlocksAndOthersGoOn) {
  Llama model = Model(Tiny(2));
  GenerationEngineOptions options;
  options.block_size = 4;
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok());
  std::vector<GenerationRequest> requests = Mixed();
  const int64_t kept = *(*engine)->Submit(requests[0]);
  const int64_t dropped = *(*engine)->Submit(requests[3]);
  ASSERT_TRUE((*engine)->Step().ok());
  const int64_t held = (*engine)->Stats().cache_blocks - (*engine)->Stats().cache_free_blocks;
  ASSERT_TRUE((*engine)->Cancel(dropped).ok());
  // requests[3]: 17 prompt + its first token = 18 positions = 5 blocks of 4
  // (Note [Growing reservations]: not its 9 new tokens' 26).
  EXPECT_EQ((*engine)->Stats().cache_blocks - (*engine)->Stats().cache_free_blocks, held - 5);
  EXPECT_EQ((*engine)->Cancel(dropped).code(), absl::StatusCode::kNotFound);
  while (!(*engine)->Idle()) ASSERT_TRUE((*engine)->Step().ok());
  auto cancelled = (*engine)->TakeResult(dropped);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->finished, FinishReason::kCancelled);
  auto finished = (*engine)->TakeResult(kept);
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(finished->tokens.size(), 6u);
}

TEST(GenerationEngineTest, BadRequestsAndOptionsAreRefusedNamingTheField) {
  Llama model = Model(Tiny(2));
  GenerationEngineOptions options;
  options.cache_positions = 40;
  options.block_size = 8;
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok());
  auto refused = [&](GenerationRequest request) {
    auto id = (*engine)->Submit(std::move(request));
    EXPECT_FALSE(id.ok());
    return std::string(id.status().message());
  };
  GenerationRequest good;
  good.prompt = {1, 2, 3};
  good.max_new_tokens = 4;
  GenerationRequest r = good;
  r.prompt.clear();
  EXPECT_THAT(refused(r), HasSubstr("prompt: no tokens"));
  r = good;
  r.prompt[1] = 64;
  EXPECT_THAT(refused(r), HasSubstr("prompt: token 1 (64) is not below the vocabulary size 64"));
  r = good;
  r.max_new_tokens = 0;
  EXPECT_THAT(refused(r), HasSubstr("max_new_tokens must be >= 1"));
  r = good;
  r.sampling.greedy = false;
  r.sampling.temperature = 0;
  EXPECT_THAT(refused(r), HasSubstr("temperature must be > 0"));
  r = good;
  r.sampling.top_p = 1.5;
  EXPECT_THAT(refused(r), HasSubstr("top_p must be in (0, 1]"));
  r = good;
  r.max_new_tokens = 126;
  EXPECT_THAT(refused(r), HasSubstr("longer than the model's context (128, max_position_embeddings)"));
  r = good;
  r.max_new_tokens = 38;
  EXPECT_THAT(refused(r), HasSubstr("more than the whole key/value cache holds (40)"));
  EXPECT_TRUE((*engine)->CheckRequest(good).ok());
  EXPECT_THAT(std::string((*engine)->CheckRequest(r).message()), HasSubstr("more than the whole key/value cache"));
  EXPECT_TRUE((*engine)->Idle());
  // GenerateAll with a bad request in the middle leaves nothing queued.
  auto all = (*engine)->GenerateAll({good, r, good});
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(std::string(all.status().message()), HasSubstr("request 1: "));
  EXPECT_TRUE((*engine)->Idle()) << "the good request before the bad one is still queued";
  EXPECT_EQ((*engine)->Stats().cache_free_blocks, (*engine)->Stats().cache_blocks);

  options.max_sequences = 8;
  options.max_tokens_per_step = 4;
  auto bad = GenerationEngine::Create(model, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("max_tokens_per_step (4) must be >= max_sequences (8)"));
}

}  // namespace
}  // namespace dslaunch::runtime
