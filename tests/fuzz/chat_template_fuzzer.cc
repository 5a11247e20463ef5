// libFuzzer target: a chat template as a model folder carries it
// (tokenizer_config.json's chat_template; Note [Chat templates in Jinja],
// runtime/serve/jinja_template.h), parsed and, when it parses, rendered with
// a two-message conversation. Every input either renders or is an error
// naming the template; no crash, no hang past the renderer's step budget.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"

#include "runtime/serve/jinja_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dslaunch::runtime::JinjaTemplate;
  using dslaunch::runtime::JinjaValue;
  const absl::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = JinjaTemplate::Parse(source, "fuzz-template");
  if (!parsed.ok()) {
    if (parsed.status().message().find("fuzz-template") == std::string_view::npos) __builtin_trap();
    return 0;
  }
  auto message = [](const char* role, const char* content) {
    return JinjaValue::MakeDict({{"role", JinjaValue::String(role)}, {"content", JinjaValue::String(content)}});
  };
  const JinjaValue::Dict variables = {
      {"messages", JinjaValue::MakeList({message("system", " Be brief. "), message("user", "Hi\n")})},
      {"add_generation_prompt", JinjaValue::Bool(true)},
      {"tools", JinjaValue::None()},
      {"bos_token", JinjaValue::String("<s>")},
      {"eos_token", JinjaValue::String("</s>")}};
  auto text = parsed->Render(variables);
  if (!text.ok() && text.status().message().find("fuzz-template") == std::string_view::npos) __builtin_trap();
  return 0;
}
