// Note [Constrained output]: the JSON and choice forms byte by byte, the
// tokens a state allows from a vocabulary's trie, and the engine generating
// under a form with a random model: every output is in the form, and a
// stopped one is whole. (runtime/serve's constrained_json_test.cc checks
// the JSON verdicts against the strict JSON reader.)
#include "runtime/generate/output_constraint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/generate/generation_engine.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

OutputConstraint Json() { return OutputConstraint::JsonObject(); }
OutputConstraint Choices(std::vector<std::string> choices) {
  return OutputConstraint::Choice(std::move(choices));
}

// 1: a whole object; 0: a prefix of one; -1: not a prefix.
int Judge(const OutputConstraint& constraint, const std::string& text) {
  bool complete = false;
  if (!AllowsPrefix(constraint, text, &complete)) return -1;
  return complete ? 1 : 0;
}

TEST(OutputConstraintTest, JsonObjectsAreWholeAndTheirPrefixesAllowed) {
  for (const std::string whole : {
           R"({})",
           R"({"a": [1, -2.5e+3, 0, 0.25, true, false, null, "x\u00e9\n\"\\"], "b": {}, "c": []})",
           "{\n  \"nested\": {\"deeper\": [[], [{}]]},\n  \"text\": \"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"\n}",
           R"(  {"e": 1E5, "f": -0, "\ud83d\ude00": "\uD83D\uDE00"})",
       }) {
    SCOPED_TRACE(whole);
    EXPECT_EQ(Judge(Json(), whole), 1);
    for (size_t cut = 0; cut < whole.size(); ++cut) {
      EXPECT_EQ(Judge(Json(), whole.substr(0, cut)), 0) << "cut at " << cut;
    }
  }
}

TEST(OutputConstraintTest, WhatIsNotJsonOrNotAnObjectIsRefusedAtTheFirstBadByte) {
  for (const std::string bad : {
           "[1]", "\"text\"", "1", "{\"a\":01}", "{\"a\" 1}", "{,}", "{\"a\":1,}", "{\"a\":tru e}",
           "{\"a\":\"\x01\"}", "{\"a\":\"\x80\"}", "{\"a\":\"\xC3(\"}", "{\"a\":1}}", "{} ", "{}{}",
           "{\"a\":-}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12G4\"}", "{a:1}",
           "{\"a\":[1 2]}", "{\"a\":[1,]}", "{\"a\":]}",
           // A lone surrogate escape (the strict reader and serde_json refuse it).
           R"({"a":"\ud800"})", R"({"a":"\udc00)", R"({"a":"\uD83D\n)", R"({"a":"\ud83d\u0041)",
       }) {
    EXPECT_EQ(Judge(Json(), bad), -1) << bad;
  }
}

TEST(OutputConstraintTest, JsonHasBoundsAModelCannotStallIn) {
  EXPECT_EQ(Judge(Json(), "{" + std::string(kMaxJsonWhitespaceRun, ' ') + "}"), 1);
  EXPECT_EQ(Judge(Json(), "{" + std::string(kMaxJsonWhitespaceRun + 1, ' ')), -1);
  std::string deep = "{\"a\":";
  for (int depth = 1; depth < kMaxJsonDepth; ++depth) deep += "[";
  EXPECT_EQ(Judge(Json(), deep), 0);
  EXPECT_EQ(Judge(Json(), deep + "["), -1);
  EXPECT_EQ(Judge(Json(), "{\"a\":" + std::string(kMaxJsonNumberBytes, '7') + "}"), 1);
  EXPECT_EQ(Judge(Json(), "{\"a\":" + std::string(kMaxJsonNumberBytes + 1, '7')), -1);
  // '.', 'e' or a sign only with room for the digit after it: a number at
  // its bound can always end.
  const std::string digits = "{\"a\":" + std::string(kMaxJsonNumberBytes - 2, '7');
  EXPECT_EQ(Judge(Json(), digits + ".5}"), 1);
  EXPECT_EQ(Judge(Json(), digits + "7."), -1);
  EXPECT_EQ(Judge(Json(), digits + "7e"), -1);
  EXPECT_EQ(Judge(Json(), digits + "e-"), -1);
  EXPECT_EQ(Judge(Json(), digits.substr(0, digits.size() - 1) + "e-5}"), 1);
}

// RFC 3629 in strings: no overlong forms, no surrogates, nothing past U+10FFFF.
TEST(OutputConstraintTest, StringsHoldWholeUtf8Only) {
  EXPECT_EQ(Judge(Json(), "{\"a\":\"\xED\x9F\xBF \xF4\x8F\xBF\xBF \xE0\xA0\x80\"}"), 1);
  for (const std::string bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80",
                                "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xBF"}) {
    EXPECT_EQ(Judge(Json(), "{\"a\":\"" + bad), -1) << ::testing::PrintToString(bad);
  }
}

TEST(OutputConstraintTest, AChoiceIsExactlyOneOfTheStrings) {
  const OutputConstraint c = Choices({"yes", "no", "yes sir"});
  EXPECT_EQ(Judge(c, ""), 0);
  EXPECT_EQ(Judge(c, "ye"), 0);
  EXPECT_EQ(Judge(c, "yes"), 1);
  EXPECT_EQ(Judge(c, "yes s"), 0);
  EXPECT_EQ(Judge(c, "yes sir"), 1);
  EXPECT_EQ(Judge(c, "yes sir!"), -1);
  EXPECT_EQ(Judge(c, "nope"), -1);
  EXPECT_EQ(Judge(c, "maybe"), -1);
}

// A vocabulary of a few multi-byte tokens: each step allows exactly the
// tokens whose every byte the form takes, and the stop token once whole.
TEST(OutputConstraintTest, TheMaskAllowsTheTokensWhoseBytesTheFormTakes) {
  //                                 0    1    2     3    4        5    6    7    8       9   10 (stop)
  const std::vector<std::string> bytes = {"{", "}", "\"", "a", "\"a\"", ":", "1", " ", "{\"", "}}", ""};
  auto vocabulary = std::make_shared<const TokenVocabulary>(bytes);
  auto state = StartOutputConstraint(Json(), vocabulary, "response_format");
  ASSERT_TRUE(state.ok()) << state.status();
  auto allowed = [&]() {
    torch::Tensor logits = torch::zeros({12});  // two ids past the tokenizer's
    (*state)->Mask(logits, /*stop_tokens=*/{10});
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 12; ++i) {
      if (!std::isinf(logits[i].item<float>())) ids.push_back(i);
    }
    return ids;
  };
  using ::testing::ElementsAre;
  EXPECT_THAT(allowed(), ElementsAre(0, 7, 8));
  (*state)->Accept(8);  // {"
  EXPECT_THAT(allowed(), ElementsAre(0, 1, 2, 3, 5, 6, 7, 8, 9)) << "inside a key: text, or its close";
  (*state)->Accept(3);
  (*state)->Accept(2);  // {"a"
  EXPECT_THAT(allowed(), ElementsAre(5, 7));
  (*state)->Accept(5);
  EXPECT_THAT(allowed(), ElementsAre(0, 2, 4, 6, 7, 8));
  (*state)->Accept(6);  // {"a":1
  EXPECT_FALSE((*state)->Complete());
  EXPECT_THAT(allowed(), ElementsAre(1, 6, 7)) << "more digits, the close, whitespace; not the stop token";
  (*state)->Accept(1);
  EXPECT_TRUE((*state)->Complete());
  EXPECT_TRUE((*state)->Finished());
  EXPECT_THAT(allowed(), ElementsAre(10)) << "once whole, only the stop token";

  auto choice = StartOutputConstraint(Choices({"a1", "a"}), vocabulary, "guided_choice");
  ASSERT_TRUE(choice.ok()) << choice.status();
  (*choice)->Accept(3);
  EXPECT_TRUE((*choice)->Complete());
  EXPECT_FALSE((*choice)->Finished()) << "a1 extends a";
  torch::Tensor logits = torch::zeros({11});
  (*choice)->Mask(logits, {10});
  EXPECT_FALSE(std::isinf(logits[6].item<float>()));
  EXPECT_FALSE(std::isinf(logits[10].item<float>()));
  EXPECT_TRUE(std::isinf(logits[3].item<float>()));
}

TEST(OutputConstraintTest, ConstraintsNoRequestMayCarryAreRefusedNamingTheField) {
  auto vocabulary = std::make_shared<const TokenVocabulary>(std::vector<std::string>{"a", "b"});
  EXPECT_THAT(StartOutputConstraint(Choices({}), vocabulary, "guided_choice").status().message(),
              HasSubstr("guided_choice: no choices"));
  EXPECT_THAT(StartOutputConstraint(Choices({"a", ""}), vocabulary, "guided_choice").status().message(),
              HasSubstr("guided_choice[1] is empty"));
  EXPECT_THAT(StartOutputConstraint(Choices({std::string(kMaxGuidedChoiceBytes, 'a'), "b"}), vocabulary,
                                    "guided_choice")
                  .status()
                  .message(),
              HasSubstr("bytes of choices, more than the 16384 allowed"));
  EXPECT_THAT(StartOutputConstraint(Choices({"zz"}), vocabulary, "guided_choice").status().message(),
              HasSubstr("no token of the vocabulary can begin any of the choices"));
  EXPECT_THAT(StartOutputConstraint(Json(), vocabulary, "response_format").status().message(),
              HasSubstr("can begin a JSON object"));
  EXPECT_THAT(StartOutputConstraint(Json(), nullptr, "response_format").status().message(),
              HasSubstr("needs the tokenizer's vocabulary"));
}

// The byte tokenizer's vocabulary (TokenBytesOf: ASCII bytes alone; the
// others are not whole UTF-8 and eos has no text), as a model of 257 ids.
std::shared_ptr<const TokenVocabulary> ByteVocabulary() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 128; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  return std::make_shared<const TokenVocabulary>(bytes);
}

TEST(OutputConstraintTest, TheEngineGeneratesOnlyWhatTheFormAllowsAndStopsWhenWhole) {
  Llama model(::dslaunch::runtime::testing::GenerationTestLlama(/*heads=*/4, /*kv_heads=*/2, /*head_dim=*/8,
                                                                  /*vocab_size=*/257),
              /*seed=*/5);
  model->eval();
  GenerationEngineOptions options;
  options.max_sequences = 4;
  options.cache_positions = 4096;
  options.vocabulary = ByteVocabulary();
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<GenerationRequest> requests;
  const std::vector<OutputConstraint> forms = {Json(), Choices({"red", "green", "blue", "green apple"}), Json(),
                                               Choices({"yes", "no"})};
  for (size_t i = 0; i < forms.size(); ++i) {
    GenerationRequest request;
    request.prompt = {72, 105, 33, static_cast<int64_t>(40 + i)};
    request.max_new_tokens = 100;
    request.stop_tokens = {256};
    request.sampling.greedy = i < 2;
    request.sampling.temperature = 0.8;
    request.sampling.seed = 3 + i;
    request.constraint = forms[i];
    requests.push_back(request);
  }
  auto results = (*engine)->GenerateAll(requests);
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t i = 0; i < forms.size(); ++i) {
    std::string text;
    for (int64_t token : (*results)[i].tokens) {
      if (token != 256) text.push_back(static_cast<char>(token));
    }
    SCOPED_TRACE(::testing::Message() << "request " << i << ": " << text);
    bool complete = false;
    EXPECT_TRUE(AllowsPrefix(forms[i], text, &complete));
    if ((*results)[i].finished == FinishReason::kStop) {
      EXPECT_TRUE(complete);  // the verdict agrees with a strict JSON reader: serve's ConstrainedJsonTest
    } else {
      EXPECT_EQ((*results)[i].finished, FinishReason::kLength);
    }
  }
  // The choices are short: the engine ends them, whole.
  EXPECT_EQ((*results)[1].finished, FinishReason::kStop);
  EXPECT_EQ((*results)[3].finished, FinishReason::kStop);
  // Without a vocabulary, refused naming the constraint.
  options.vocabulary = nullptr;
  auto bare = GenerationEngine::Create(model, options);
  ASSERT_TRUE(bare.ok());
  EXPECT_THAT((*bare)->CheckRequest(requests[0]).message(), HasSubstr("output constraint"));
}

}  // namespace
}  // namespace dslaunch::runtime
