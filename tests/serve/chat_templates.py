#!/usr/bin/env python3
"""The chat templates and conversations dsserve's Jinja renderer is checked
against (runtime/serve/jinja_template.h), rendered by jinja2 exactly as
transformers renders a chat template (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols, raise_exception and strftime_now): the reference.

usage: chat_templates.py --write HEADER   writes the C++ cases with jinja2's output
       chat_templates.py --check HEADER   exits 1 unless HEADER is what --write writes
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = {
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
        "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
        "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
        "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
        "{% endfor %}"),
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}"),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] "
        "== 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
        "roles are supported!') }}{% endif %}{% endfor %}"),
    "qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "zephyr": """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}""",
    # Llama 3.1's constructs: "-" everywhere, a namespace, tests, slices, tojson.
    "llama31_like": """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- set ns = namespace(turns=0, last_user='') %}
{%- for message in messages if message.role != 'tool' %}
    {%- set ns.turns = ns.turns + 1 %}
    {%- if message.role == 'user' %}
        {%- set ns.last_user = message.content %}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
{#- turns: a comment #}
{{- '' if ns.turns > 0 else raise_exception('no turns') }}""",
    # The rest of the subset, each construct once.
    "features": """{# a comment at the start #}
{%- set d = {'b': 2, 'a': 1} -%}
{% for k, v in d.items() %}{{ k }}={{ v }}{{ ', ' if not loop.last }}{% endfor %}
{% for m in messages %}[{{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ m.role|upper }} {{ m.content|length }}]
{% else %}none
{% endfor %}
{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 7 %}{% break %}{% endif %}{{ i }}{% endfor %}
{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' ~ none }}
{{ 'Hello World'.split() | join('|') }} {{ 'a,b,,c'.split(',') | length }} {{ '  pad  '.strip() }}! {{ 'xxhixx'.strip('x') }}
{{ 'abc'[::-1] }} {{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][-1] }} {{ 'hello'[1:] }} {{ (1, 2)[1] }} {{ (3,)|length }}
{{ 'x' in 'xyz' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ none is none }} {{ 3 is divisibleby 3 }}
{{ 'title case words'|title }} {{ 'cAPITAL'|capitalize }} {{ 'abcabc'|replace('b', 'B') }} {{ [3, 1, 3]|unique|list }}
{{ undefined_name|default('fallback') }} {{ ''|default('empty', true) }} {{ [1, 2]|first }} {{ [1, 2]|last }}
{{ {'k': [1, 'two', none, true]}|tojson }} {{ {'k': {'n': 1.5}}|tojson(indent=2) }}
{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='role')|list }} {{ 1.0 }} {{ 2.5 * 2 }}
{{ messages[0].content.startswith('Hi') }} {{ messages[0]['role'].endswith('er') }} {{ true and 'yes' }} {{ 0 or '' or 'last' }}
{%- set block %}
  inside {{ messages|length }}
{%- endset %}
{{ block }}
  {%+ if true %}kept indent{% endif %}
    {% if true %}stripped indent{% endif +%}
after
{{ 'é'|length }} {{ messages[5] is defined }} {{ messages[0].missing is undefined }}
{%- set builtin_tools = ['brave_search', 'code_interpreter', 'wolfram_alpha'] %}
{{ "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") }} {{ [0, 1, '', 'x', none]|select|list }}
{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('divisibleby', 3)|list }} {{ messages|map(attribute='role')|select('ne', 'user')|list }}""",
    # Macros, as tool-calling templates define them: defaults, keywords, one
    # macro calling another, the top-level names seen inside, the caller's not.
    "macros": """{%- set prefix = '>> ' %}
{%- macro render_turn(message, marker='*', upper=false) -%}
{{ prefix }}{{ marker }}{{ message.role|upper if upper else message.role }}: {{ message.content|trim }}
{%- endmacro %}
{%- macro wrap(text, left='[', right=']') %}{{ left ~ text ~ right }}{% endmacro %}
{%- for message in messages %}
{{ wrap(render_turn(message, upper=loop.first), right=']' ~ loop.index) }}
{%- if message.role == 'user' %}{{ wrap(loop.index, '(', ')') }}{% endif %}
{%- endfor %}
{%- macro seen() %}{{ message is defined }}/{{ prefix }}{% endmacro %}
{{ seen() }}
{%- if add_generation_prompt %}{{ render_turn({'role': 'assistant', 'content': ''}, '#') }}{% endif %}""",
    # Call blocks (caller() with arguments and defaults, nested, seeing
    # the names of the block's place), filter blocks (chained, with
    # arguments) and a recursive loop (loop(items), loop.depth).
    "blocks": """{%- set mark = '~' %}
{%- macro turn(message) -%}
<{{ message.role }}>{{ caller(message.content|trim) }}</{{ message.role }}>
{%- endmacro %}
{%- macro framed(title, left='[') -%}
{{ left }}{{ title }}: {{ caller() }}!
{%- endmacro %}
{%- for message in messages %}
{%- call(text, suffix='.') turn(message) %}{% filter upper %}{{ text }}{% endfilter %}{{ suffix }}{{ loop.index }}{{ mark }}{% endcall %}
{%- endfor %}
{%- call framed('end', left='{') %}{% filter replace(' ', '_') | trim %} {{ messages|length }} turns {% endfilter %}{% call framed('inner') %}{{ mark }}{% endcall %}{% endcall %}
{%- for node in [{'name': 'a', 'kids': [{'name': 'b', 'kids': []}, {'name': 'c', 'kids': [{'name': messages|length, 'kids': []}]}]}] recursive %}
{{- node.name }}{{ loop.depth }}{% if node.kids %}({{ loop(node.kids) }}){% endif %}{% if not loop.last %},{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}{% filter title %}<assistant> say something{% endfilter %}{% endif %}""",
}

CONVERSATIONS = {
    "system_user": [{"role": "system", "content": " You are terse. "}, {"role": "user", "content": "Hi there"}],
    "three_turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "},
                    {"role": "user", "content": "Name a color\nplease"}],
    "user_only": [{"role": "user", "content": "Hi <b>&</b> \"quoted\""}],
    "two_users": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
}

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def render(source, messages, add_generation_prompt):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    environment.globals["raise_exception"] = raise_exception
    template = environment.from_string(source)
    try:
        return True, template.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=None,
                                     **SPECIAL)
    except jinja2.exceptions.TemplateError as error:
        return False, str(error)


def c_string(text):
    out = []
    for byte in text.encode():
        c = chr(byte)
        if c == "\\" or c == '"':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= byte < 127:
            out.append(c)
        else:
            out.append("\\%03o" % byte)
    return '"' + "".join(out) + '"'


def header():
    lines = ["// Written by tests/serve/chat_templates.py --write (jinja2 " + jinja2.__version__.rsplit(".", 1)[0] +
             ".x, rendering as transformers does): do not edit.",
             "#pragma once", "", "namespace dslaunch::runtime {", "",
             "struct JinjaReferenceCase {", "  const char* name;", "  const char* source;",
             "  const char* messages;  // JSON", "  bool add_generation_prompt;",
             "  bool ok;  // false: the template raised", "  const char* expected;  // the text, or the message raised",
             "};", "", "inline constexpr JinjaReferenceCase kJinjaReferenceCases[] = {"]
    for name, source in TEMPLATES.items():
        for conversation, messages in CONVERSATIONS.items():
            for add in (True, False):
                ok, text = render(source, messages, add)
                lines.append(f"    {{{c_string(name + '/' + conversation + ('/prompt' if add else ''))},")
                lines.append(f"     {c_string(source)},")
                lines.append(f"     {c_string(json.dumps(messages))}, {str(add).lower()}, {str(ok).lower()},")
                lines.append(f"     {c_string(text)}}},")
    lines += ["};", "", "}  // namespace dslaunch::runtime", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("--write", "--check"):
        sys.exit(__doc__)
    if sys.argv[1] == "--write":
        open(sys.argv[2], "w").write(header())
    elif open(sys.argv[2]).read() != header():
        sys.exit(f"{sys.argv[2]} is not what jinja2 {jinja2.__version__} renders: run {sys.argv[0]} --write {sys.argv[2]}")
    else:
        print(f"PASS: {sys.argv[2]} is what jinja2 {jinja2.__version__} renders for every template and conversation")
