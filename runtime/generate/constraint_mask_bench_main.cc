// constraint_mask_bench: what constrained output (Note [Constrained output])
// costs a decode step on the host, against a reference measured in the same
// run: the host's own choice of a token (SampleToken, greedy, over the same
// vocabulary's logits).
//
//   constraint_mask_bench [--vocab 32000] [--repeats 200]
//
// The vocabulary is synthetic and shaped like a SentencePiece one: the
// ASCII bytes alone, then words of 1-10 letters, digits and JSON's
// punctuation, half of them with a leading space. Prints, per JSON state
// (the object's start, inside a string, inside a number) and for a
// three-way guided_choice, for schemas (a key, bounded and unbounded
// strings, a string under a pattern and under format date-time, a number
// within bounds) and for a
// structural tag (free text, a trigger half written, the tag's JSON): the
// first mask of a state (the trie walk), a mask of a state seen before (the
// cache), both in microseconds and as a multiple of the reference. Then what
// compiling a pattern costs a request (Note [String patterns]): a format's,
// and the two that the bounds refuse (too many states; too much work), in
// milliseconds, against the compile bound's design figure (well under a
// second).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/generate/json_schema.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/generate/sampling.h"
#include "runtime/generate/string_pattern.h"

namespace dslaunch::runtime {
namespace {

std::vector<std::string> SyntheticVocabulary(int64_t size) {
  std::vector<std::string> tokens(static_cast<size_t>(size));
  for (int b = 0; b < 128 && b < size; ++b) tokens[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyzeeeeaaaoooiiittnnss0123456789{}[]\":,. ";
  std::mt19937_64 random(7);
  for (int64_t id = 256; id < size; ++id) {
    std::string word = random() % 2 == 0 ? " " : "";
    const int64_t length = 1 + static_cast<int64_t>(random() % 10);
    for (int64_t i = 0; i < length; ++i) word.push_back(alphabet[random() % alphabet.size()]);
    tokens[static_cast<size_t>(id)] = word;
  }
  return tokens;
}

double Microseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

int Main(int argc, char** argv) {
  int64_t vocab = 32000, repeats = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int64_t* value = flag == "--vocab" ? &vocab : flag == "--repeats" ? &repeats : nullptr;
    if (value == nullptr || i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], value) || *value < 1 ||
        (value == &vocab && *value < 300)) {
      std::fprintf(stderr, "constraint_mask_bench: bad flag %s (--vocab N >= 300, --repeats N >= 1)\n", argv[i]);
      return 2;
    }
    ++i;
  }
  auto vocabulary = std::make_shared<const TokenVocabulary>(SyntheticVocabulary(vocab));
  std::printf("vocabulary: %lld tokens, %zu trie nodes\n", static_cast<long long>(vocab),
              vocabulary->nodes().size());
  const torch::Tensor logits = torch::randn({vocab + 1});
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions greedy;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < repeats; ++i) (void)SampleToken(logits, greedy, generator);
  const double reference = Microseconds(std::chrono::steady_clock::now() - start) / repeats;
  std::printf("reference: the host's greedy choice over the logits: %.1f us\n", reference);

  // Token ids of the synthetic vocabulary's single bytes: the text to reach each state.
  struct Case {
    const char* name;
    OutputConstraint constraint;
    std::string text;
  };
  // Note [JSON schemas for constrained output]: an object of named
  // properties, one a string of at most 40 code points.
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer"},)"
      R"("email":{"type":"string"}},"required":["name","email"],"additionalProperties":false})";
  // Note [String patterns]: a string under a pattern, one of a format.
  const std::string patterned =
      R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},)"
      R"("when":{"type":"string","format":"date-time"}},"required":["code","when"],"additionalProperties":false})";
  // Note [Number bounds]: a number held to its bounds and step digit by digit.
  const std::string bounded =
      R"({"type":"object","properties":{"t":{"type":"number","minimum":-273.15,"maximum":1000},)"
      R"("n":{"type":"integer","multipleOf":5}},"required":["t","n"],"additionalProperties":false})";
  // Note [Structural tags]: a tool call in hermes' tags among free text.
  const std::string call_schema =
      R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",)"
      R"("properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}},)"
      R"("required":["name","arguments"],"additionalProperties":false})";
  const OutputConstraint tagged =
      OutputConstraint::StructuralTag({{"<tool_call>", call_schema, "</tool_call>"}}, {"<tool_call>"});
  const std::vector<Case> cases = {
      {"json, the object's start", OutputConstraint::JsonObject(), ""},
      {"json, inside a string", OutputConstraint::JsonObject(), "{\"ab"},
      {"json, inside a number", OutputConstraint::JsonObject(), "{\"a\": 12"},
      {"guided_choice of 3", OutputConstraint::Choice({"positive", "negative", "neutral"}), "ne"},
      {"schema, a property's key", OutputConstraint::JsonSchema(schema), "{\"name\": \"x\", \""},
      {"schema, a string of at most 40", OutputConstraint::JsonSchema(schema), "{\"name\": \"ab"},
      {"schema, an unbounded string", OutputConstraint::JsonSchema(schema),
       "{\"name\": \"x\", \"email\": \"ab"},
      {"schema, a string under a pattern", OutputConstraint::JsonSchema(patterned), "{\"code\": \"AB"},
      {"schema, a string of format date-time", OutputConstraint::JsonSchema(patterned),
       "{\"code\": \"ABC-1234\", \"when\": \"2026-12-0"},
      {"schema, a number within bounds", OutputConstraint::JsonSchema(bounded), "{\"t\": -27"},
      {"structural tag, free text", tagged, "Let me look that up. "},
      {"structural tag, a trigger half written", tagged, "Let me look that up. <tool_ca"},
      {"structural tag, inside the tag's JSON", tagged,
       "Let me look that up. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa"},
  };
  const std::vector<std::string> bytes = SyntheticVocabulary(vocab);
  for (const Case& c : cases) {
    // A state's mask from its own walk: a fresh vocabulary (an empty cache) each time.
    auto mask = [&](std::shared_ptr<const TokenVocabulary> with) {
      auto state = StartOutputConstraint(c.constraint, with, "bench");  // a schema: compiled each time
      TORCH_CHECK(state.ok(), c.name, ": ", state.status().ToString());
      for (char byte : c.text) (*state)->Accept(static_cast<unsigned char>(byte));
      torch::Tensor row = logits.clone();
      const auto t0 = std::chrono::steady_clock::now();
      (*state)->Mask(row, {vocab});
      return Microseconds(std::chrono::steady_clock::now() - t0);
    };
    const int64_t cold_runs = std::min<int64_t>(repeats, 5);
    double first = 0, cached = 0;
    for (int64_t i = 0; i < cold_runs; ++i) first += mask(std::make_shared<const TokenVocabulary>(bytes));
    for (int64_t i = 0; i < repeats; ++i) cached += mask(vocabulary);
    first /= static_cast<double>(cold_runs);
    cached /= static_cast<double>(repeats);
    std::printf("%s: first mask %.1f us (%.1fx the reference), cached %.1f us (%.1fx)\n", c.name, first,
                first / reference, cached, cached / reference);
  }

  // What a pattern costs to compile (once per schema text: the compiled
  // schemas are cached), and how soon the bounds refuse the costly ones.
  std::string all_ascii = "^z";
  for (int c = 1; c < 128; ++c) {
    all_ascii += "\\x";
    all_ascii += "0123456789abcdef"[c / 16];
    all_ascii += "0123456789abcdef"[c % 16];
  }
  const absl::StatusOr<std::string> date_time = FormatPattern("date-time", "bench");
  TORCH_CHECK(date_time.ok(), date_time.status().ToString());
  const std::vector<std::pair<const char*, std::string>> patterns = {
      {"format date-time", *date_time},
      {"^[A-Z]{3}-[0-9]{4}$", "^[A-Z]{3}-[0-9]{4}$"},
      {"refused for its states: ^(a{1,1000}){1,1000}$", "^(a{1,1000}){1,1000}$"},
      {"refused for its work: long closures over every ASCII symbol",
       "^a{0,999}[^a](?:b?){1000}(?:b?){1000}(?:b?){1000}(?:b?){1000}|" + all_ascii},
  };
  const int64_t compile_runs = std::min<int64_t>(repeats, 3);
  for (const auto& [name, pattern] : patterns) {
    double total = 0;
    std::string outcome;
    for (int64_t i = 0; i < compile_runs; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<StringPattern> compiled = StringPattern::Compile(pattern, "bench");
      total += Microseconds(std::chrono::steady_clock::now() - t0);
      outcome = compiled.ok() ? absl::StrCat(compiled->states(), " states")
                              : std::string(compiled.status().message().substr(0, 80));
    }
    const double milliseconds = total / static_cast<double>(compile_runs) / 1000.0;
    std::printf("pattern %s: compiled in %.2f ms (%.1fx the reference; %.3f of the one-second design bound): %s\n",
                name, milliseconds, milliseconds * 1000.0 / reference, milliseconds / 1000.0, outcome.c_str());
  }
  // Note [Number bounds]: the tables of the largest step held, with bounds.
  {
    const std::string widest = R"({"type":"integer","multipleOf":1000,"minimum":-5,"maximum":1e15})";
    const auto t0 = std::chrono::steady_clock::now();
    auto compiled = CompileJsonSchemaText(widest, "bench");
    const double milliseconds = Microseconds(std::chrono::steady_clock::now() - t0) / 1000.0;
    TORCH_CHECK(compiled.ok(), compiled.status().ToString());
    std::printf("number bounds with multipleOf 1000: compiled in %.2f ms (%.1fx the reference)\n", milliseconds,
                milliseconds * 1000.0 / reference);
  }
  return 0;
}

}  // namespace
}  // namespace dslaunch::runtime

int main(int argc, char** argv) { return dslaunch::runtime::Main(argc, argv); }
