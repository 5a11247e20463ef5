// Note [Structural tags]: free text until a trigger, then the structure it
// opens (begin, JSON of the schema, end), then free text again; triggers
// found inside tokens, across them and overlapping; the tokens a state
// allows (never one of unknown bytes); the engine generating under a
// structural tag with a random model.
#include "runtime/generate/structural_tag_automaton.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/generate/generation_engine.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/testing/generation_llama.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 1: whole (free text); 0: a prefix (inside a structure); -1: not a prefix.
int JudgeTagged(const OutputConstraint& form, const std::string& text) {
  bool complete = false;
  if (!AllowsPrefix(form, text, &complete)) return -1;
  return complete ? 1 : 0;
}

OutputConstraint ToolCallTag() {
  return OutputConstraint::StructuralTag(
      {{"<tool_call>\n", R"({"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object",
        "properties":{"n":{"type":"integer"}},"additionalProperties":false}},"required":["name","arguments"],
        "additionalProperties":false})",
        "\n</tool_call>"}},
      {"<tool_call>"});
}

TEST(StructuralTagTest, TextIsFreeUntilATriggerThenHeldToItsStructureThenFreeAgain) {
  const OutputConstraint form = ToolCallTag();
  EXPECT_EQ(JudgeTagged(form, ""), 1);
  EXPECT_EQ(JudgeTagged(form, "Any text at all: {\"json\" or not}, <b>tags</b>, caf\xC3\xA9."), 1);
  EXPECT_EQ(JudgeTagged(form, "almost <tool_cal"), 1) << "a trigger begun is still free text";
  EXPECT_EQ(JudgeTagged(form, "<tool_calls> <tool_callx> <tool_call "), 1) << "near misses are text";
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 12}}\n</tool_call>";
  for (size_t cut = std::string("<tool_call>").size(); cut < call.size(); ++cut) {
    EXPECT_EQ(JudgeTagged(form, "I will call. " + call.substr(0, cut)), 0) << cut;
  }
  EXPECT_EQ(JudgeTagged(form, "I will call. " + call), 1);
  EXPECT_EQ(JudgeTagged(form, call + " and again " + call + "\n" + call), 1) << "each call held, text between";
  EXPECT_EQ(JudgeTagged(form, "<tool_call>{"), -1) << "the rest of the begin";
  EXPECT_EQ(JudgeTagged(form, "<tool_call>\n{\"name\": \"g\""), -1);
  EXPECT_EQ(JudgeTagged(form, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1.5"), -1);
  EXPECT_EQ(JudgeTagged(form, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} "), -1) << "the end follows the value";
  EXPECT_EQ(JudgeTagged(form, "<<tool_call>\n"), 0) << "a trigger after a false start";
}

TEST(StructuralTagTest, StructuresSharingATriggerAreChosenByTheBytesAfterIt) {
  const OutputConstraint form = OutputConstraint::StructuralTag(
      {{"<function=get_weather>", R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})",
        "</function>"},
       {"<function=get_time>", R"({"type":"object","properties":{"zone":{"enum":["utc"]}},"required":["zone"]})",
        "</function>"}},
      {"<function="});
  EXPECT_EQ(JudgeTagged(form, "ok <function=get_"), 0);
  EXPECT_EQ(JudgeTagged(form, "ok <function=get_x"), -1);
  EXPECT_EQ(JudgeTagged(form, "<function=get_time>{\"zone\": \"utc\"}</function>"), 1);
  EXPECT_EQ(JudgeTagged(form, "<function=get_time>{\"city\""), -1) << "get_weather's key in get_time";
  EXPECT_EQ(JudgeTagged(form, "<function=get_weather>{\"city\": \"Oslo\"}</function> done"), 1);
}

TEST(StructuralTagTest, TriggersAreFoundWhereverTheyEndTheLongestFirst) {
  // "b" ends inside "ab": the text "ab" holds both; the longer one opens.
  const std::string any = R"({"type":"integer"})";
  const OutputConstraint form =
      OutputConstraint::StructuralTag({{"ab[", any, "]"}, {"b(", any, ")"}}, {"ab", "b"});
  EXPECT_EQ(JudgeTagged(form, "xab[1]"), 1);
  EXPECT_EQ(JudgeTagged(form, "xab("), -1) << "ab opened, not b";
  EXPECT_EQ(JudgeTagged(form, "xb(2)"), 1);
  EXPECT_EQ(JudgeTagged(form, "aab[3] a"), 1);
  EXPECT_EQ(JudgeTagged(form, "ax"), 1);
  EXPECT_EQ(JudgeTagged(form, "b["), -1);
}

TEST(StructuralTagTest, FormsThatCouldNotWorkAreRefusedNamingTheField) {
  const std::string any = "{}";
  auto refused = [](const std::vector<TaggedStructure>& structures, const std::vector<std::string>& triggers) {
    return std::string(StructuralTagForm::Compile(structures, triggers, 8, "response_format").status().message());
  };
  EXPECT_THAT(refused({}, {"<"}), HasSubstr("response_format.structures: none given"));
  EXPECT_THAT(refused({{"<a>", any, "</a>"}}, {}), HasSubstr("response_format.triggers: none given"));
  EXPECT_THAT(refused({{"<a>", any, "</a>"}}, {"<a", ""}), HasSubstr("response_format.triggers[1]: empty"));
  EXPECT_THAT(refused({{"<a>", any, "</a>"}}, {"<b"}),
              HasSubstr("response_format.triggers[0]: '<b' begins no structure's begin"));
  EXPECT_THAT(refused({{"<a>", any, "</a>"}, {"[b]", any, "[/b]"}}, {"<"}),
              HasSubstr("response_format.structures[1].begin: '[b]' starts with none of the triggers"));
  EXPECT_THAT(refused({{"<a>", any, ""}}, {"<"}), HasSubstr("response_format.structures[0].end: empty"));
  EXPECT_THAT(refused({{"<a>", R"js({"type":"string","pattern":"(?!x)"})js", "</a>"}}, {"<"}),
              HasSubstr("response_format.structures[0].schema"));
  EXPECT_THAT(refused({{"<a>", any, std::string(kMaxStructureTagBytes + 1, 'x')}}, {"<"}),
              HasSubstr("more than the 1024 allowed"));
}

TEST(StructuralTagTest, TheMaskKeepsFreeTextFreeAndATriggerWhole) {
  //                                       0             1        2         3     4    5        6       7      8
  const std::vector<std::string> bytes = {"<tool_call>", "<tool", "_call>", "\n", "{", "x",     "",     "",   "<tool_call>z",
                                          //  9                 10                                           11
                                          "<tool_call>\n{", "{\"name\": \"f\", \"arguments\": {}}", "\n</tool_call>"};
  auto vocabulary = std::make_shared<const TokenVocabulary>(bytes);
  auto state = StartOutputConstraint(ToolCallTag(), vocabulary, "response_format");
  ASSERT_TRUE(state.ok()) << state.status();
  auto allowed = [&]() {
    torch::Tensor logits = torch::zeros({13});  // one id past the tokenizer's
    (*state)->Mask(logits, /*stop_tokens=*/{7});
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < logits.size(0); ++i) {
      if (!std::isinf(logits[i].item<float>())) ids.push_back(i);
    }
    return ids;
  };
  // Free text: any token of known bytes and the stop token, but not one that
  // goes on from a trigger where its structure does not (8); not 6, a token
  // of unknown bytes (it could hide part of a trigger).
  EXPECT_THAT(allowed(), ElementsAre(0, 1, 2, 3, 4, 5, 7, 9, 10, 11));
  (*state)->Accept(1);  // <tool
  EXPECT_TRUE((*state)->Complete());
  EXPECT_THAT(allowed(), ElementsAre(0, 1, 2, 3, 4, 5, 7, 9, 10, 11)) << "a trigger begun is still free text";
  (*state)->Accept(2);  // <tool_call>, across two tokens
  EXPECT_FALSE((*state)->Complete());
  EXPECT_THAT(allowed(), ElementsAre(3)) << "inside: the begin's newline only";
  (*state)->Accept(3);
  EXPECT_THAT(allowed(), ElementsAre(3, 4, 10)) << "whitespace or a value";
  (*state)->Accept(10);
  EXPECT_THAT(allowed(), ElementsAre(3, 11)) << "the end, or its first byte";
  (*state)->Accept(11);
  EXPECT_TRUE((*state)->Complete());
  EXPECT_FALSE((*state)->Finished());
  EXPECT_THAT(allowed(), ElementsAre(0, 1, 2, 3, 4, 5, 7, 9, 10, 11)) << "free again";
  (*state)->Accept(9);  // the trigger and more, in one token
  EXPECT_THAT(allowed(), ElementsAre(3)) << "after '{' whitespace or a key: no token here begins one";
}

TEST(StructuralTagTest, TheEngineGeneratesOnlyWhatTheTagAllows) {
  Llama model(::dslaunch::runtime::testing::GenerationTestLlama(/*heads=*/4, /*kv_heads=*/2, /*head_dim=*/8,
                                                                  /*vocab_size=*/257),
              /*seed=*/7);
  model->eval();
  GenerationEngineOptions options;
  options.max_sequences = 4;
  options.cache_positions = 4096;
  std::vector<std::string> bytes(257);  // the byte tokenizer's: ASCII alone
  for (int b = 0; b < 128; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  options.vocabulary = std::make_shared<const TokenVocabulary>(bytes);
  auto engine = GenerationEngine::Create(model, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // One-byte triggers, so that a random model opens structures often.
  const OutputConstraint form = OutputConstraint::StructuralTag(
      {{"<", R"({"type":"object","properties":{"k":{"type":"integer"}},"additionalProperties":false})", ">"},
       {"[", R"({"enum":[1,2]})", "]"}},
      {"<", "["});
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest request;
    request.prompt = {72, 105, 33, 40 + i};
    request.max_new_tokens = 120;  // the test model's context is 128
    request.stop_tokens = {256};
    request.sampling.temperature = 1.0;
    request.sampling.seed = 11 + static_cast<uint64_t>(i);
    request.constraint = form;
    requests.push_back(request);
  }
  auto results = (*engine)->GenerateAll(requests);
  ASSERT_TRUE(results.ok()) << results.status();
  int opened = 0;
  for (const GenerationResult& result : *results) {
    std::string text;
    for (int64_t token : result.tokens) {
      if (token != 256) text.push_back(static_cast<char>(token));
    }
    SCOPED_TRACE(text);
    bool complete = false;
    EXPECT_TRUE(AllowsPrefix(form, text, &complete));
    if (result.finished == FinishReason::kStop) {
      EXPECT_TRUE(complete);
    }
    opened += static_cast<int>(std::count(text.begin(), text.end(), '<') + std::count(text.begin(), text.end(), '['));
  }
  EXPECT_GT(opened, 0) << "no structure opened: the test checks nothing";
}

// The JSON form (vLLM's response_format, dsgen --structural_tag FILE): read
// into structures and triggers, "type" optional, every problem named.
TEST(StructuralTagTest, ReadFromJsonNamingEachPlace) {
  auto read = [](const std::string& text) {
    auto value = ParseJson(text, "tag.json");
    EXPECT_TRUE(value.ok()) << value.status();
    return ReadStructuralTag(*value, "tag.json");
  };
  auto spec = read(R"({"structures": [{"begin": "<f>", "schema": {"type": "object", "title": "t"}, "end": "</f>"}],
                      "triggers": ["<f"]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->structures.size(), 1u);
  EXPECT_EQ(spec->structures[0].begin, "<f>");
  EXPECT_EQ(spec->structures[0].end, "</f>");
  EXPECT_EQ(spec->structures[0].schema, R"({"type":"object","title":"t"})");
  EXPECT_THAT(spec->triggers, ElementsAre("<f"));
  EXPECT_TRUE(read(R"({"type": "structural_tag", "structures": [{"begin": "<", "schema": {}, "end": ">"}],
                       "triggers": ["<"]})").ok());
  EXPECT_THAT(std::string(read(R"({"structures": [], "triggers": []})").status().message()),
              HasSubstr("tag.json"));  // StructuralTagForm's own checks, under the same name
  auto refused = [&](const std::string& text) { return std::string(read(text).status().message()); };
  EXPECT_THAT(refused(R"({"type": "json_object", "structures": [], "triggers": []})"),
              HasSubstr("tag.json.type: expected \"structural_tag\""));
  EXPECT_THAT(refused(R"([1])"), HasSubstr("tag.json: expected an object with structures and triggers, got an array"));
  EXPECT_THAT(refused(R"({"structures": [{"begin": 1, "schema": {}, "end": ">"}], "triggers": []})"),
              HasSubstr("tag.json.structures[0].begin: expected a string, got a number"));
  EXPECT_THAT(refused(R"({"structures": [{"begin": "<", "schema": {"minimum": "x"}, "end": ">"}], "triggers": ["<"]})"),
              HasSubstr("tag.json.structures[0].schema: schema/minimum: expected a number"));
  EXPECT_THAT(refused(R"({"structures": [], "triggers": [true]})"),
              HasSubstr("tag.json.triggers[0]: expected a string, got a bool"));
  EXPECT_THAT(refused(R"({"structures": []})"), HasSubstr("tag.json: a structural_tag needs its triggers"));
}

}  // namespace
}  // namespace dslaunch::runtime
