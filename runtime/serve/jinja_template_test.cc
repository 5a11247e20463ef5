// Note [Chat templates in Jinja]: real chat templates (Llama 2, Llama 3,
// Mistral, Qwen2, Zephyr, a Llama 3.1-like one) and one using the rest of
// the subset render as jinja2 renders them for transformers
// (tests/serve/chat_templates.py wrote the expected text); what the renderer
// lacks is refused at parse time, naming it and its line.
#include "runtime/serve/jinja_template.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/serve/jinja_reference_cases_for_test.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(JinjaTemplateTest, RendersAsJinja2RendersForTransformers) {
  int rendered = 0, raised = 0;
  for (const JinjaReferenceCase& c : kJinjaReferenceCases) {
    SCOPED_TRACE(c.name);
    auto parsed = JinjaTemplate::Parse(c.source, "chat_template");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto messages = ParseJson(c.messages, "messages");
    ASSERT_TRUE(messages.ok()) << messages.status();
    const JinjaValue::Dict variables = {{"messages", JinjaValueFromJson(*messages)},
                                        {"add_generation_prompt", JinjaValue::Bool(c.add_generation_prompt)},
                                        {"tools", JinjaValue::None()},
                                        {"bos_token", JinjaValue::String("<s>")},
                                        {"eos_token", JinjaValue::String("</s>")}};
    auto text = parsed->Render(variables);
    if (c.ok) {
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_EQ(*text, c.expected);
      ++rendered;
    } else {
      ASSERT_FALSE(text.ok()) << *text;
      EXPECT_THAT(std::string(text.status().message()), HasSubstr(c.expected));
      ++raised;
    }
  }
  EXPECT_GT(rendered, 40);
  EXPECT_GT(raised, 2) << "raise_exception is exercised";
}

TEST(JinjaTemplateTest, WhatTheRendererLacksIsRefusedAtParseTimeNamingIt) {
  struct Case {
    const char* source;
    const char* message;
  };
  for (const Case& c : {
           Case{"{% macro m() %}x{% endmacro %}", "chat_template:1: the statement 'macro' is not one"},
           Case{"a\n{{ x|wordcount }}", "chat_template:2: the filter 'wordcount' is not one"},
           Case{"{{ x is callable }}", "the test 'callable' is not one"},
           Case{"{% if x %}never closed", "expected {% elif or else or endif %}"},
           Case{"{{ x ", "a tag {{ is never closed"},
           Case{"{{ 'open }}", "is never closed"},
           Case{"{{ 1 + }}", "the expression ends too soon"},
           Case{"{% for x in %}{% endfor %}", "the expression ends too soon"},
           Case{"{{ a b }}", "unexpected 'b'"},
       }) {
    auto parsed = JinjaTemplate::Parse(c.source, "chat_template");
    ASSERT_FALSE(parsed.ok()) << c.source;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.message)) << c.source;
  }
}

TEST(JinjaTemplateTest, ErrorsWhileRenderingNameTheLine) {
  auto parsed = JinjaTemplate::Parse("ok\n{{ undefined_name.field }}", "chat_template");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto text = parsed->Render({});
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("chat_template:2: an undefined value has no attribute"));
  parsed = JinjaTemplate::Parse("{{ 1 + 'a' }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(std::string(parsed->Render({}).status().message()), HasSubstr("'+' between an integer and a string"));
  parsed = JinjaTemplate::Parse("{{ strftime_now('%Y') | length }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed->Render({}), "4");
}

}  // namespace
}  // namespace dslaunch::runtime
