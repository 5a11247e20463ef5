// Note [Chat prompts]: a conversation is encoded as training encodes a chat
// record, ends with the assistant's prefix, and the assistant's end of turn
// stops generation (a stop token when it is one special token).
#include "runtime/serve/chat_prompt.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/serve/serve_test_tokenizers.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Byte-level ids: 12 Hello  17 Ġworld  8 !  18 <|bos|>  19 <|eot|>  21 <  22 |  23 >  24 t  1 e  3 o
ChatTemplate EotTemplate() {
  ChatTemplate chat;
  chat.system = RoleTemplate{"", "<|eot|>"};
  chat.user = RoleTemplate{"", "<|eot|>"};
  chat.assistant = RoleTemplate{"Hello", "<|eot|>"};
  return chat;
}

TEST(ChatPromptTest, MessagesAreEncodedAsTrainingEncodesAChatRecord) {
  auto tokenizer = TinyTokenizer(kTinyByteLevelJson);
  auto prompt = BuildChatPrompt(*tokenizer, EotTemplate(),
                                {{"system", " world"}, {"user", "Hello<|eot|>"}, {"assistant", "!"}, {"user", "!"}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  // bos; " world" <|eot|>; "Hello" then the user's "<|eot|>" as characters, <|eot|>;
  // assistant "Hello" "!" <|eot|>; user "!" <|eot|>; the assistant's prefix.
  EXPECT_THAT(prompt->tokens, ElementsAre(18, 17, 19, 12, 21, 22, 1, 3, 24, 22, 23, 19, 12, 8, 19, 8, 19, 12));
  EXPECT_THAT(prompt->stop_tokens, ElementsAre(19)) << "the assistant's <|eot|> is one special token";
  EXPECT_THAT(prompt->stop_strings, IsEmpty());

  // The same ids as training's segments for the turns they share.
  std::vector<TextSegment> segments = {{"", false, true},   {" world", false, false}, {"<|eot|>", false, true},
                                       {"", false, true},   {"Hello<|eot|>", false, false},
                                       {"<|eot|>", false, true}};
  EncodedRecord record = EncodeRecord(*tokenizer, segments);
  record.tokens.pop_back();  // training's eos (-1 here: none)
  EXPECT_EQ(std::vector<int64_t>(record.tokens.begin(), record.tokens.end()),
            std::vector<int64_t>(prompt->tokens.begin(), prompt->tokens.begin() + 12));
}

TEST(ChatPromptTest, AnEndOfTurnThatIsNotOneSpecialTokenIsAStopString) {
  auto tokenizer = TinyTokenizer(kTinyByteLevelJson, /*eos_id=*/19);
  ChatTemplate chat;
  chat.user = RoleTemplate{"", "\n"};
  chat.assistant = RoleTemplate{"", "\n###\n"};
  auto prompt = BuildChatPrompt(*tokenizer, chat, {{"user", "Hello"}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_THAT(prompt->stop_tokens, ElementsAre(19)) << "eos";
  EXPECT_THAT(prompt->stop_strings, ElementsAre("\n###\n"));
}

TEST(ChatPromptTest, ConversationsTheTemplateCannotWriteAreRefusedNamingTheMessage) {
  auto tokenizer = TinyTokenizer(kTinyByteLevelJson);
  ChatTemplate no_system = EotTemplate();
  no_system.system.reset();
  auto refused = BuildChatPrompt(*tokenizer, no_system, {{"system", "x"}, {"user", "y"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("messages[0].role: the chat template has no system role"));
  auto ends_with_assistant = BuildChatPrompt(*tokenizer, EotTemplate(), {{"user", "y"}, {"assistant", "z"}});
  ASSERT_FALSE(ends_with_assistant.ok());
  EXPECT_THAT(std::string(ends_with_assistant.status().message()),
              HasSubstr("messages[1]: the conversation ends with the assistant's message"));
}

// Note [Tool calls]: the request's tools reach the template as `tools`; an
// assistant's calls as tool_calls (present only when made, the arguments an
// object); a tool's answer with its tool_call_id. The job file's prefix and
// suffix form cannot write them and refuses by message.
TEST(ChatPromptTest, ToolsAndToolConversationsReachTheTemplate) {
  auto tokenizer = TinyTokenizer(kTinyByteLevelJson);
  auto jinja = JinjaTemplate::Parse(
      "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}={{ t | tojson }}{% endfor %}</tools>{% endif %}"
      "{% for m in messages %}[{{ m.role }}]{% if m.content %}{{ m.content }}{% endif %}"
      "{% if 'tool_calls' in m %}{% for c in m.tool_calls %}<call {{ c.id }}>{{ c.function.name }}"
      "{{ c.function.arguments | tojson }}{{ c.function.arguments.city }}</call>{% endfor %}{% endif %}"
      "{% if m.role == 'tool' %}({{ m.tool_call_id }}){% endif %}{% endfor %}",
      "t");
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  auto tools = ParseJson(R"([{"type": "function", "function": {"name": "get_weather"}}])", "tools");
  ASSERT_TRUE(tools.ok());
  ChatMessage call{"assistant", "", {ChatToolCall{"call_1", "get_weather", R"({"city":"Paris"})"}}, "", true};
  ChatMessage answer{"tool", "18 C", {}, "call_1"};
  auto text = RenderJinjaChat(JinjaChatTemplate{*jinja, {}}, {{"user", "Weather?"}, call, answer}, &*tools);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<tools>get_weather={\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}</tools>"
            "[user]Weather?[assistant]<call call_1>get_weather{\"city\": \"Paris\"}Paris</call>[tool]18 C(call_1)");
  // Without tools the variable is none, and no message has tool_calls.
  EXPECT_EQ(*RenderJinjaChat(JinjaChatTemplate{*jinja, {}}, {{"user", "Hi"}}), "[user]Hi");

  auto refused = BuildChatPrompt(*tokenizer, EotTemplate(), {{"user", "Weather?"}, call, answer});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("messages[1]: a tool conversation needs"));
}

}  // namespace
}  // namespace dslaunch::runtime
