// libFuzzer target: a JSON schema as a request hands it over
// (response_format json_schema, guided_json, a tool's parameters; Note [JSON
// schemas for constrained output], runtime/generate/json_schema.h), then
// bytes stepped through the automaton it compiles to. The input is the
// schema's text, a NUL byte, then the output's bytes. Every schema compiles
// or is an error naming it; the automaton takes the bytes it allows and
// whenever it says the output is whole, the output is JSON the strict reader
// reads (a key given twice aside: RFC 8259 allows it, the reader does not).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/generate/json_schema.h"
#include "runtime/generate/json_schema_automaton.h"
#include "runtime/tokenizer/json_value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dslaunch::runtime;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string schema_text = input.substr(0, nul);
  const std::string output = nul == std::string::npos ? std::string() : input.substr(nul + 1);
  auto schema = CompileJsonSchemaText(schema_text, "fuzz-schema");
  if (!schema.ok()) {
    if (schema.status().message().find("fuzz-schema") == std::string_view::npos) __builtin_trap();
    return 0;
  }
  JsonSchemaAutomaton automaton(schema->get());
  automaton.set_key_horizon(1 + static_cast<int64_t>(output.size() % 7));
  std::string taken;
  for (char c : output) {
    JsonSchemaAutomaton next = automaton;
    if (!next.Step(static_cast<unsigned char>(c))) break;
    automaton = next;
    taken.push_back(c);
    (void)automaton.Key();
  }
  if (automaton.Complete()) {
    auto value = ParseJson(taken, "output");
    if (!value.ok() && value.status().message().find("duplicate key") == std::string_view::npos) __builtin_trap();
  }
  return 0;
}
