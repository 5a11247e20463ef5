// Note [The folder's chat template]: where a folder keeps its template (the
// .jinja file first, then tokenizer_config.json's string or "default"), the
// special tokens' texts, a template that does not parse named by file and
// line, generation_config.json's stop tokens; a rendered chat is encoded
// with special tokens and nothing added.
#include "runtime/serve/folder_chat_template.h"

#include <string>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/serve/chat_prompt.h"
#include "runtime/serve/serve_test_tokenizers.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string RenderOne(const JinjaChatTemplate& chat) {
  JinjaValue::Dict variables = chat.special_tokens;
  variables.emplace_back("messages", JinjaValue::MakeList({JinjaValue::MakeDict(
                                         {{"role", JinjaValue::String("user")}, {"content", JinjaValue::String("hi")}})}));
  auto text = chat.jinja.Render(variables);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(FolderChatTemplateTest, TheFoldersTemplateIsFoundWhereTransformersKeepsIt) {
  dslaunch::TestTempDir dir;
  auto none = ReadFolderChatTemplate(dir.path());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value()) << "no tokenizer_config.json: no template";
  dir.Write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
      "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"})");
  auto plain = ReadFolderChatTemplate(dir.path());
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(plain->has_value());
  EXPECT_EQ(RenderOne(**plain), "<s>[user] hi</s>");
  dir.Write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "tools"},
      {"name": "default", "template": "default {{ messages|length }}"}]})");
  auto named = ReadFolderChatTemplate(dir.path());
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(RenderOne(**named), "default 1");
  dir.Write("chat_template.jinja", "from the file");
  auto file = ReadFolderChatTemplate(dir.path());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(RenderOne(**file), "from the file") << "chat_template.jinja comes first";
}

TEST(FolderChatTemplateTest, BadTemplatesAndConfigsAreNamed) {
  dslaunch::TestTempDir dir;
  dir.Write("tokenizer_config.json", R"({"chat_template": "line one\n{% include \"other.jinja\" %}"})");
  auto bad = ReadFolderChatTemplate(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("tokenizer_config.json (chat_template):2: the statement 'include' is not one"));
  dir.Write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  EXPECT_THAT(std::string(ReadFolderChatTemplate(dir.path()).status().message()), HasSubstr("no template named \"default\""));
  dir.Write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THAT(std::string(ReadFolderChatTemplate(dir.path()).status().message()),
              HasSubstr("chat_template must be a string or a list"));
  const std::string jinja = dir.Write("t.jinja", "{{ x");
  EXPECT_THAT(std::string(ReadJinjaChatTemplateFile(jinja, dir.path()).status().message()),
              HasSubstr("t.jinja:1: a tag {{ is never closed"));
}

TEST(FolderChatTemplateTest, GenerationConfigsEosTokensStopGeneration) {
  dslaunch::TestTempDir dir;
  EXPECT_TRUE(ReadGenerationStopTokens(dir.path())->empty());
  dir.Write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [128001, 128009]})");
  EXPECT_THAT(*ReadGenerationStopTokens(dir.path()), ElementsAre(128001, 128009));
  dir.Write("generation_config.json", R"({"eos_token_id": 2})");
  EXPECT_THAT(*ReadGenerationStopTokens(dir.path()), ElementsAre(2));
  dir.Write("generation_config.json", R"({"eos_token_id": "2"})");
  EXPECT_THAT(std::string(ReadGenerationStopTokens(dir.path()).status().message()),
              HasSubstr("generation_config.json: eos_token_id must be a token id"));
}

// Byte-level ids: 12 Hello  17 Ġworld  8 !  18 <|bos|>  19 <|eot|>
TEST(FolderChatTemplateTest, ARenderedChatIsEncodedWithSpecialTokensAndNothingAdded) {
  auto tokenizer = TinyTokenizer(kTinyByteLevelJson);
  auto jinja = JinjaTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}{{ m.content }}<|eot|>{% endfor %}"
      "{% if m is not defined and add_generation_prompt %}Hello{% endif %}",
      "t");
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  JinjaChatTemplate chat{*jinja, {{"bos_token", JinjaValue::String("<|bos|>")}}};
  auto prompt = BuildJinjaChatPrompt(*tokenizer, chat, {{"user", "Hello world"}, {"assistant", "!"}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->tokens, std::vector<int64_t>({18, 12, 17, 19, 8, 19, 12}));
  auto raised = JinjaTemplate::Parse("{{ raise_exception('roles must alternate') }}", "t");
  ASSERT_TRUE(raised.ok());
  auto refused = BuildJinjaChatPrompt(*tokenizer, JinjaChatTemplate{*raised, {}}, {{"user", "x"}});
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("messages: t:1: the template raised: roles must alternate"));
}

}  // namespace
}  // namespace dslaunch::runtime
