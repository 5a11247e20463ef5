// Note [Chat templates in Jinja]: real chat templates (Llama 2, Llama 3,
// Mistral, Qwen2, Zephyr, a Llama 3.1-like one) and one using the rest of
// the subset render as jinja2 renders them for transformers
// (tests/serve/chat_templates.py wrote the expected text); what the renderer
// lacks is refused at parse time, naming it and its line.
#include "runtime/serve/jinja_template.h"

#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
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
           Case{"a\n{% include 'other.jinja' %}", "chat_template:2: the statement 'include' is not one"},
           Case{"{% call m %}x{% endcall %}", "a call block calls a macro: expected name(arguments)"},
           Case{"{% call(a, a) m() %}x{% endcall %}", "the parameter 'a' is named twice"},
           Case{"{% call m() %}never closed", "expected {% endcall %}"},
           Case{"{% filter wordcount %}x{% endfilter %}", "the filter 'wordcount' is not one"},
           Case{"{% filter upper %}never closed", "expected {% endfilter %}"},
           Case{"{% for x in y recursive if %}{% endfor %}", "unexpected 'if'"},
           Case{"{% macro m(a, a) %}{% endmacro %}", "the parameter 'a' is named twice"},
           Case{"{% macro m(a=1, b) %}{% endmacro %}", "the parameter 'b' without a default follows one with"},
           Case{"{% macro m() %}never closed", "expected {% endmacro %}"},
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
  // Python's integers do not overflow; a 64-bit one says so (fuzzing found the literal).
  EXPECT_THAT(std::string(JinjaTemplate::Parse("{{ 99999999999999999999 }}", "t").status().message()),
              HasSubstr("t:1: the number 99999999999999999999 is out of range"));
  parsed = JinjaTemplate::Parse("{{ 9223372036854775807 + 1 }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(std::string(parsed->Render({}).status().message()), HasSubstr("'+' overflows a 64-bit integer"));
  parsed = JinjaTemplate::Parse("{{ [1, 2, 3][::9223372036854775807] }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed->Render({}), "[1]");
  // A macro called with what it does not take.
  for (auto [call, message] : {
           std::pair<const char*, const char*>{"m(1, 2, 3)", "t:2: the macro 'm' takes 2 argument(s), got 3"},
           {"m(c=1)", "the macro 'm' has no parameter 'c'"},
           {"m(1, a=2)", "the macro 'm' got 'a' twice"}}) {
    parsed = JinjaTemplate::Parse(absl::StrCat("{% macro m(a, b=2) %}{{ a }}{% endmacro %}\n{{ ", call, " }}"), "t");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(std::string(parsed->Render({}).status().message()), HasSubstr(message)) << call;
  }
  // A call block's macro, and caller() called with what it does not take
  // or read as a value (jinja2's is a macro object).
  for (auto [source, message] : {
           std::pair<const char*, const char*>{"{% call upper() %}x{% endcall %}",
                                               "t:1: a call block calls a macro; 'upper' is not one"},
           {"{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a) m() %}{% endcall %}",
            "caller() takes 1 argument(s), got 2"},
           {"{% macro m() %}{{ caller(b=1) }}{% endmacro %}{% call(a) m() %}{% endcall %}",
            "caller() has no parameter 'b'"},
           {"{% macro m() %}{{ caller|tojson }}{% endmacro %}{% call m() %}{% endcall %}", "tojson: a macro"},
           {"{% for x in [[1]] %}{{ loop(x) }}{% endfor %}", "loop(...) is called in a loop that is not recursive"},
           {"{% for x in [[1]] recursive %}{{ loop() }}{% endfor %}", "loop(...) takes the items to loop over"}}) {
    parsed = JinjaTemplate::Parse(source, "t");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(std::string(parsed->Render({}).status().message()), HasSubstr(message)) << source;
  }
  // Outside a call block's macro caller is an ordinary (here undefined) name.
  parsed = JinjaTemplate::Parse("{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed->Render({}), "False");
  // jinja2's answers: caller read as a value; a filter block's names and a
  // break inside it.
  for (auto [source, expected] : {
           std::pair<const char*, const char*>{
               "{% macro m() %}{{ caller }}|{{ caller is defined }}|{{ caller is string }}|{% if caller %}y{% endif %}"
               "{% endmacro %}{% call m() %}x{% endcall %}",
               "<Macro anonymous>|True|False|y"},
           {"{% filter upper %}{% set x = 1 %}a{% endfilter %}[{{ x }}]", "A[]"},
           {"{% for i in [1, 2, 3] %}{% filter upper %}a{{ i }}{% if i == 2 %}{% break %}{% endif %}b{% endfilter %}"
            "{% endfor %}",
            "A1B"}}) {
    parsed = JinjaTemplate::Parse(source, "t");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed->Render({}), expected) << source;
  }
  parsed = JinjaTemplate::Parse("{{ strftime_now('%Y') | length }}", "t");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed->Render({}), "4");
}

// A template from a downloaded folder runs on a request's thread: a
// runaway one ends with an error naming why, never a hang, a stack overflow
// or exhausted memory.
TEST(JinjaTemplateTest, RunawayTemplatesEndWithAnError) {
  const std::string deep(5000, '(');
  EXPECT_THAT(std::string(JinjaTemplate::Parse("{{ " + deep + "1" + std::string(5000, ')') + " }}", "t").status().message()),
              HasSubstr("expressions nested deeper than 100"));
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if true %}";
  EXPECT_THAT(std::string(JinjaTemplate::Parse(blocks, "t").status().message()), HasSubstr("blocks nested deeper than 100"));
  // A recursive macro whose body nests blocks and parentheses as deep as a
  // template may: the render's nesting is bounded before the stack is.
  std::string nested_body;
  for (int i = 0; i < 98; ++i) nested_body += "{% if true %}";
  nested_body += "{{ " + std::string(20, '(') + "m(n + 1)" + std::string(20, ')') + " }}";
  for (int i = 0; i < 98; ++i) nested_body += "{% endif %}";
  auto recursive = JinjaTemplate::Parse("{% macro m(n) %}" + nested_body + "{% endmacro %}{{ m(0) }}", "t");
  ASSERT_TRUE(recursive.ok()) << recursive.status();
  EXPECT_THAT(std::string(recursive->Render({}).status().message()),
              HasSubstr("statements and expressions nested deeper than 1000 while rendering"));
  struct Case {
    const char* source;
    const char* message;
  };
  for (const Case& c : {
           Case{"{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}"
                "{% endfor %}{% endfor %}",
                "ran over 500000 steps"},
           Case{"{{ range(2000000)|length }}", "range of over 1000000 items"},
           Case{"{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
                "macros called within macros deeper than 20"},
           Case{"{{ 'x' * 100000000 }}", "a string repeated past"},
           Case{"{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                "a string of over 67108864 bytes"},
           Case{"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                "a list of over 1000000 items"},
       }) {
    auto parsed = JinjaTemplate::Parse(c.source, "t");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto text = parsed->Render({});
    ASSERT_FALSE(text.ok()) << c.source;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr(c.message)) << c.source;
  }
}

}  // namespace
}  // namespace dslaunch::runtime
