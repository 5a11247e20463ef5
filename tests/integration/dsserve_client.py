#!/usr/bin/env python3
"""A small OpenAI-style client for dsserve's integration test (test_dsserve.sh),
written as a Python user would write one with the standard library: JSON
bodies over HTTP, server-sent events read line by line.

usage: dsserve_client.py URL KEY_FILE CHECK [ARGS...]
checks:
  greedy PROMPT DSGEN_OUT       /v1/completions at temperature 0, plain and
                                streamed, both give the text dsgen printed
  same_text COMPLETION_JSON DSGEN_OUT   a completion (curl's) has dsgen's text
  concurrent N                  N streaming requests at once (completions and
                                chats, sampled with seeds): none lost, each
                                equals the same request alone, unstreamed
  chat                          /v1/chat/completions shapes, streamed and not
  logprobs PROMPT DSGEN_LOGPROBS  log-probabilities in both endpoints' forms:
                                the greedy tokens' equal dsgen's, the top
                                alternatives in order, streamed as plain
  prompt_logprobs IDS LOGITS    echo with logprobs scores the prompt as
                                dsgen --dump_logits's forward does
  jinja_chat FOLDER             a chat with the folder's Jinja template is the
                                completion of what jinja2 renders from it
  tools FOLDER TEMPLATE         tools and a tool conversation rendered as jinja2
                                renders them, answered in OpenAI's shape
  choices                       n choices (each the single request of seed
                                + i), streamed per index, best_of's pick,
                                several prompts, echo
  errors                        the documented errors for bad input
  disconnect                    a client that goes away mid-stream, and one
                                that goes away before its non-streaming
                                answer: each request is cancelled, the cache
                                is whole again
Prints one PASS line per check; exits 1 naming what differed."""
import concurrent.futures
import datetime
import http.client
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

URL = sys.argv[1].rstrip("/")
KEY = open(sys.argv[2]).read().strip()
HOST = urllib.parse.urlparse(URL)


def dsgen_text(path):
    """The continuation dsgen printed (its last byte is the newline it adds),
    with each byte that is not UTF-8 as U+FFFD, as dsserve's JSON writes it
    (a random model may emit half a character)."""
    raw = open(path, "rb").read()[:-1]
    return "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c for c in raw.decode("utf-8", "surrogateescape"))


def check_same_text(completion_json, dsgen_out):
    got = json.load(open(completion_json))["choices"][0]["text"]
    expected = dsgen_text(dsgen_out)
    if got != expected:
        fail(f"the completion's text {got!r}, dsgen continued with {expected!r}")
    print(f"PASS: {got!r} is dsgen's continuation")


def fail(message):
    print(f"FAIL: dsserve_client: {message}", file=sys.stderr)
    sys.exit(1)


def post(path, body, key=KEY, raw=None):
    """(status, parsed JSON body)."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(URL + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def stream(path, body):
    """The chunks of a streamed response, [DONE] checked."""
    connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=120)
    connection.request("POST", path, json.dumps(dict(body, stream=True)),
                       {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    response = connection.getresponse()
    if response.status != 200:
        fail(f"streamed {path}: HTTP {response.status}: {response.read()!r}")
    if not response.getheader("Content-Type", "").startswith("text/event-stream"):
        fail(f"streamed {path}: Content-Type {response.getheader('Content-Type')}")
    chunks, done = [], False
    for line in response:
        line = line.decode().rstrip("\n")
        if not line:
            continue
        if not line.startswith("data: "):
            fail(f"streamed {path}: a line that is not 'data: ...': {line!r}")
        if done:
            fail(f"streamed {path}: data after [DONE]: {line!r}")
        if line == "data: [DONE]":
            done = True
            continue
        chunks.append(json.loads(line[len("data: "):]))
    connection.close()
    if not done:
        fail(f"streamed {path}: the stream ended without [DONE]")
    return chunks


def completion_text(chunks):
    text, reasons = "", []
    for chunk in chunks:
        if chunk["object"] != "text_completion":
            fail(f"a completion chunk of object {chunk['object']}")
        for choice in chunk["choices"]:
            text += choice["text"]
            if choice["finish_reason"] is not None:
                reasons.append(choice["finish_reason"])
    if len(reasons) != 1:
        fail(f"a stream with finish reasons {reasons}")
    return text, reasons[0]


def chat_text(chunks):
    if chunks[0]["choices"][0]["delta"] != {"role": "assistant", "content": ""}:
        fail(f"the first chat chunk is {chunks[0]}")
    text, reasons = "", []
    for chunk in chunks:
        if chunk["object"] != "chat.completion.chunk":
            fail(f"a chat chunk of object {chunk['object']}")
        for choice in chunk["choices"]:
            text += choice["delta"].get("content", "")
            if choice["finish_reason"] is not None:
                reasons.append(choice["finish_reason"])
    if len(reasons) != 1:
        fail(f"a chat stream with finish reasons {reasons}")
    return text, reasons[0]


def metrics():
    with urllib.request.urlopen(URL + "/metrics", timeout=30) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def check_greedy(prompt, dsgen_out):
    expected = dsgen_text(dsgen_out)
    status, body = post("/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0})
    if status != 200:
        fail(f"greedy completion: HTTP {status}: {body}")
    if body["object"] != "text_completion" or not body["id"].startswith("cmpl-"):
        fail(f"greedy completion: not a text_completion: {body}")
    choice = body["choices"][0]
    if choice["text"] != expected:
        fail(f"greedy completion {choice['text']!r}, dsgen continued with {expected!r}")
    usage = body["usage"]
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"] or usage["completion_tokens"] < 1:
        fail(f"usage {usage}")
    chunks = stream("/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0,
                                        "stream_options": {"include_usage": True}})
    if chunks[-1]["choices"] != [] or chunks[-1]["usage"] != usage:
        fail(f"the usage chunk {chunks[-1]}, the plain response's usage {usage}")
    text, reason = completion_text(chunks[:-1])
    if text != expected or reason != choice["finish_reason"]:
        fail(f"streamed {text!r} ({reason}), plain {expected!r} ({choice['finish_reason']})")
    print(f"PASS: greedy /v1/completions, plain and streamed in {len(chunks)} chunks, equal dsgen's {expected!r}")


def request_body(i):
    if i % 3 == 2:
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
                                        "max_tokens": 6 + i % 9, "temperature": 0.8, "seed": i}
    return "/v1/completions", {"prompt": f"Item {i}: the", "max_tokens": 4 + i % 13, "temperature": 0.7,
                               "top_p": 0.9, "seed": 1000 + i, "stop": ["xyzzy"]}


def one_streamed(i):
    path, body = request_body(i)
    chunks = stream(path, body)
    return chat_text(chunks) if "chat" in path else completion_text(chunks)


def check_concurrent(n):
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        streamed = list(pool.map(one_streamed, range(n)))
    seconds = time.monotonic() - started
    for i, (text, reason) in enumerate(streamed):
        path, body = request_body(i)
        status, plain = post(path, body)
        if status != 200:
            fail(f"request {i} alone: HTTP {status}: {plain}")
        choice = plain["choices"][0]
        alone = choice["message"]["content"] if "chat" in path else choice["text"]
        if (text, reason) != (alone, choice["finish_reason"]):
            fail(f"request {i}: streamed among {n} gave {text!r} ({reason}), alone {alone!r} ({choice['finish_reason']})")
    print(f"PASS: {n} concurrent streaming requests in {seconds:.1f} s, none lost, each equal to itself alone")


def check_chat():
    body = {"model": MODEL, "messages": [{"role": "system", "content": "Answer briefly."},
                                         {"role": "user", "content": "What color is the sky?"}],
            "max_tokens": 10, "temperature": 0}
    status, plain = post("/v1/chat/completions", body)
    if status != 200:
        fail(f"chat: HTTP {status}: {plain}")
    if plain["object"] != "chat.completion" or not plain["id"].startswith("chatcmpl-") or plain["model"] != MODEL:
        fail(f"chat: {plain}")
    message = plain["choices"][0]["message"]
    if message["role"] != "assistant":
        fail(f"chat message {message}")
    text, reason = chat_text(stream("/v1/chat/completions", body))
    if (text, reason) != (message["content"], plain["choices"][0]["finish_reason"]):
        fail(f"chat streamed {text!r} ({reason}), plain {message['content']!r}")
    print(f"PASS: /v1/chat/completions plain and streamed agree: {text!r} ({reason})")


def check_logprobs(prompt, dsgen_logprobs):
    # dsgen's "id logprob" lines (then its text, which may be any bytes).
    expected = [float(f[1]) for f in (line.split() for line in open(dsgen_logprobs, "rb"))
                if len(f) == 2 and f[0].isdigit() and f[1].startswith(b"-")]
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3}
    status, plain = post("/v1/completions", body)
    if status != 200:
        fail(f"logprobs: HTTP {status}: {plain}")
    choice, usage = plain["choices"][0], plain["usage"]
    logprobs = choice["logprobs"]
    if set(logprobs) != {"tokens", "token_logprobs", "top_logprobs", "text_offset"}:
        fail(f"completion logprobs keys {sorted(logprobs)}")
    got = logprobs["token_logprobs"]
    if len(got) != usage["completion_tokens"] or len(got) != len(expected):
        fail(f"{len(got)} token log-probabilities for {usage['completion_tokens']} tokens, dsgen printed {len(expected)}")
    for i, (a, b) in enumerate(zip(got, expected)):
        if abs(a - b) > 2e-6:
            fail(f"token {i}: log-probability {a}, dsgen's {b}")
    for i, top in enumerate(logprobs["top_logprobs"]):
        values = list(top.values())
        if not 1 <= len(values) <= 3 or values != sorted(values, reverse=True):
            fail(f"token {i}: top_logprobs {top}")
        if abs(values[0] - got[i]) > 1e-12:  # greedy: the chosen token is the most probable
            fail(f"token {i}: the most probable alternative {top}, the chosen token's {got[i]}")
    if "\ufffd" not in choice["text"]:  # (a half character is U+FFFD in a token and in the text alike, but not 1:1)
        if "".join(logprobs["tokens"]) != choice["text"]:
            fail(f"the tokens {logprobs['tokens']} joined are not the text {choice['text']!r}")
        lengths = [len(t) for t in logprobs["tokens"]]  # characters, as OpenAI counts
        if logprobs["text_offset"] != [sum(lengths[:i]) for i in range(len(lengths))]:
            fail(f"text_offset {logprobs['text_offset']} for tokens {logprobs['tokens']}")
    chunks = stream("/v1/completions", body)
    streamed = [v for c in chunks for ch in c["choices"] if ch["logprobs"] for v in ch["logprobs"]["token_logprobs"]]
    if streamed != got:
        fail(f"streamed token_logprobs {streamed}, plain {got}")

    chat = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 6, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    status, plain = post("/v1/chat/completions", chat)
    if status != 200:
        fail(f"chat logprobs: HTTP {status}: {plain}")
    content = plain["choices"][0]["logprobs"]["content"]
    if len(content) != plain["usage"]["completion_tokens"]:
        fail(f"{len(content)} chat entries for {plain['usage']['completion_tokens']} tokens")
    for entry in content:
        if set(entry) != {"token", "logprob", "bytes", "top_logprobs"} or len(entry["top_logprobs"]) != 2:
            fail(f"a chat logprobs entry {entry}")
        if "\ufffd" not in entry["token"] and bytes(entry["bytes"]) != entry["token"].encode():
            fail(f"bytes {entry['bytes']} of the token {entry['token']!r}")
        if entry["top_logprobs"][0]["logprob"] != entry["logprob"]:
            fail(f"greedy chat: the chosen token {entry} is not the most probable")
    streamed = [e for c in stream("/v1/chat/completions", chat) for ch in c["choices"] if ch["logprobs"]
                for e in ch["logprobs"]["content"]]
    if streamed != content:
        fail(f"streamed chat logprobs {streamed}, plain {content}")
    print(f"PASS: logprobs: {len(got)} greedy tokens' equal dsgen's, top alternatives in order, chat entries with "
          "bytes, streamed as plain")


def safetensors_f32(path, name):
    """One F32 tensor of a safetensors file, as (shape, flat list): the format
    read by hand (8-byte header length, JSON header, raw little-endian data)."""
    import array
    import struct
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8:8 + length])[name]
    begin, end = entry["data_offsets"]
    values = array.array("f")
    values.frombytes(data[8 + length + begin:8 + length + end])
    return entry["shape"], values.tolist()


def check_prompt_logprobs(ids, dsgen_logits):
    """What lm-eval-harness's loglikelihood request sends (token ids, echo,
    logprobs 1, max_tokens 1, temperature 0) and reads: the prompt's tokens
    scored as the training forward scores them (dsgen --dump_logits)."""
    import math
    prompt = [int(i) for i in ids.split(",")]
    shape, flat = safetensors_f32(dsgen_logits, "logits")
    vocab = shape[-1]
    body = {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    status, plain = post("/v1/completions", body)
    if status != 200:
        fail(f"prompt logprobs: HTTP {status}: {plain}")
    logprobs = plain["choices"][0]["logprobs"]
    scores, tops = logprobs["token_logprobs"], logprobs["top_logprobs"]
    if len(scores) != len(prompt) + 1 or scores[0] is not None or tops[0] is not None:
        fail(f"prompt logprobs: {len(scores)} entries for a prompt of {len(prompt)} and 1 token, first {scores[0]}")
    for p in range(1, len(prompt)):
        row = flat[(p - 1) * vocab:p * vocab]
        top = max(row)
        expected = row[prompt[p]] - top - math.log(sum(math.exp(x - top) for x in row))
        if abs(scores[p] - expected) > 1e-4:
            fail(f"prompt token {p}: log-probability {scores[p]}, the training forward's {expected}")
        if len(tops[p]) != 1 or max(tops[p].values()) < scores[p] - 1e-12:
            fail(f"prompt token {p}: top_logprobs {tops[p]}")
    ctxlen = len(prompt) - 3  # as lm-eval reads a continuation of 3 tokens
    greedy = all(s == max(t.values()) for s, t in zip(scores[ctxlen:-1], tops[ctxlen:-1]))
    text = plain["choices"][0]["text"]
    if "\ufffd" not in text and "".join(logprobs["tokens"]) != text:
        fail(f"echo: the tokens {logprobs['tokens']} joined are not the text {text!r}")
    print(f"PASS: prompt log-probabilities (echo, logprobs 1, max_tokens 1) equal the training forward's for "
          f"{len(prompt) - 1} tokens; lm-eval's reading: sum {sum(scores[ctxlen:-1]):.4f}, greedy {greedy}")


def check_jinja_chat(folder):
    """Note [The folder's chat template]: a chat on a folder whose
    tokenizer_config.json carries a Jinja template is the completion of the
    prompt jinja2 renders from it as transformers does (the reference)."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
    import chat_templates
    config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What color is the sky?"}]
    chat_templates.SPECIAL.update(bos_token=config["bos_token"], eos_token=config["eos_token"])
    ok, rendered = chat_templates.render(config["chat_template"], messages, True)
    if not ok or not rendered.startswith(config["bos_token"]):
        fail(f"jinja2 rendered {rendered!r}")
    body = {"max_tokens": 6, "temperature": 0}
    status, chat = post("/v1/chat/completions", dict(body, messages=messages))
    if status != 200:
        fail(f"jinja chat: HTTP {status}: {chat}")
    # The completion adds bos itself, as the rendered text begins with it.
    status, completion = post("/v1/completions", dict(body, prompt=rendered[len(config["bos_token"]):]))
    if status != 200:
        fail(f"the rendered prompt's completion: HTTP {status}: {completion}")
    if chat["usage"]["prompt_tokens"] != completion["usage"]["prompt_tokens"]:
        fail(f"the chat's prompt is {chat['usage']['prompt_tokens']} tokens, jinja2's rendering "
             f"{completion['usage']['prompt_tokens']}: {rendered!r}")
    if chat["choices"][0]["message"]["content"] != completion["choices"][0]["text"]:
        fail(f"the chat answered {chat['choices'][0]['message']['content']!r}, the rendered prompt's completion "
             f"{completion['choices'][0]['text']!r}")
    # The template's own refusal (roles must alternate) is a 400 naming messages.
    expect_error("alternation", 400, *post("/v1/chat/completions", {"messages": [
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"}]}), param="messages",
        message="Conversation roles must alternate")
    print(f"PASS: the folder's Jinja chat template: a chat is the completion of jinja2's rendering "
          f"({chat['usage']['prompt_tokens']} prompt tokens); its raise_exception is a 400")


def check_tools(folder, template_path):
    """Note [Tool calls]: tools and a tool conversation reach the model as
    jinja2 renders them, as transformers does (json.dumps for tojson, an
    assistant's call arguments as objects, as vLLM hands them over); the answer
    is OpenAI's message (content, or tool_calls with finish_reason
    tool_calls); streamed, the same; what cannot be honoured is a 400."""
    import os
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    template = environment.from_string(open(template_path).read())
    bos = json.load(open(os.path.join(folder, "tokenizer_config.json")))["bos_token"]
    bos = bos["content"] if isinstance(bos, dict) else bos
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Today's weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    answered = asked + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]

    def rendered(messages):
        for_template = json.loads(json.dumps(messages))
        for message in for_template:
            for call in message.get("tool_calls", []):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        return template.render(messages=for_template, tools=tools, add_generation_prompt=True, bos_token=bos)

    body = {"max_tokens": 6, "temperature": 0, "tools": tools}
    for label, messages in (("a question", asked), ("a tool's answer", answered)):
        status, chat = post("/v1/chat/completions", dict(body, messages=messages))
        if status != 200:
            fail(f"tools, {label}: HTTP {status}: {chat}")
        status, completion = post("/v1/completions", {"max_tokens": 6, "temperature": 0,
                                                      "prompt": rendered(messages)[len(bos):]})
        if status != 200:
            fail(f"the rendered prompt's completion: HTTP {status}: {completion}")
        if chat["usage"]["prompt_tokens"] != completion["usage"]["prompt_tokens"]:
            fail(f"tools, {label}: the chat's prompt is {chat['usage']['prompt_tokens']} tokens, jinja2's rendering "
                 f"{completion['usage']['prompt_tokens']}")
        choice = chat["choices"][0]
        message = choice["message"]
        if "tool_calls" in message:  # a random model that called: OpenAI's shape
            if choice["finish_reason"] != "tool_calls" or not all(
                    c["type"] == "function" and c["id"].startswith("call_") and
                    isinstance(json.loads(c["function"]["arguments"]), dict) for c in message["tool_calls"]):
                fail(f"tools, {label}: a call in the wrong shape: {chat}")
        elif message["content"] != completion["choices"][0]["text"] or choice["finish_reason"] not in ("stop", "length"):
            fail(f"tools, {label}: the answer {message!r} ({choice['finish_reason']}) is not the rendered prompt's "
                 f"completion {completion['choices'][0]['text']!r}")
        if label == "a question":
            text, reason = chat_text(stream("/v1/chat/completions", dict(body, messages=messages)))
            if "tool_calls" not in message and (text, reason) != (message["content"], choice["finish_reason"]):
                fail(f"tools, streamed: {text!r} ({reason}), unstreamed {message['content']!r}")
    status, none = post("/v1/chat/completions", dict(body, messages=asked, tool_choice="none"))
    if status != 200 or "tool_calls" in none["choices"][0]["message"]:
        fail(f"tool_choice none: HTTP {status}: {none}")
    calls = check_required_calls(asked)
    expect_error("a tool's answer without its call id", 400, *post("/v1/chat/completions", dict(
        body, messages=asked + [{"role": "tool", "content": "x"}])), param="messages", message="tool_call_id")
    print(f"PASS: tools: a question and a tool's answer reach the model as jinja2 renders them "
          f"({chat['usage']['prompt_tokens']} prompt tokens), answered in OpenAI's shape, streamed the same; "
          f"tool_choice none served; {calls}")


def check_required_calls(asked):
    """Note [Required tool calls]: tool_choice required and a named function
    hold the answer to a call (hermes tags around it), its arguments to the
    tool's schema; the answer comes back as OpenAI's tool_calls."""
    tools = [{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
                 "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
                 "additionalProperties": False}}},
             {"type": "function", "function": {"name": "get_time", "parameters": {
                 "type": "object", "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}}}]
    whole = 0
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        for seed in range(1, 4):
            body = {"messages": asked, "tools": tools, "tool_choice": choice, "max_tokens": 300,
                    "temperature": 0.8, "seed": seed}
            status, chat = post("/v1/chat/completions", body)
            if status != 200:
                fail(f"tool_choice {choice}: HTTP {status}: {chat}")
            reply = chat["choices"][0]
            message = reply["message"]
            if reply["finish_reason"] == "length":
                if not (message.get("content") or "").startswith("<tool_call>\n"):
                    fail(f"tool_choice {choice} seed {seed}: cut short outside a call: {message}")
                continue
            calls = message.get("tool_calls") or []
            if reply["finish_reason"] != "tool_calls" or len(calls) != 1:
                fail(f"tool_choice {choice} seed {seed}: not one call: {chat}")
            name, arguments = calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])
            if choice != "required" and name != "get_time":
                fail(f"tool_choice get_time seed {seed}: called {name}")
            if name == "get_weather" and not (list(arguments) == ["city"] and isinstance(arguments["city"], str) and
                                              len(arguments["city"]) <= 12):
                fail(f"get_weather's arguments {arguments} do not validate")
            if name == "get_time" and arguments.get("zone") not in ("utc", "local"):
                fail(f"get_time's arguments {arguments} do not validate")
            whole += 1
    if whole == 0:
        fail("tool_choice required / named: no call whole within 300 tokens")
    expect_error("tool_choice names no tool", 400, *post("/v1/chat/completions", {
        "messages": asked, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_news"}}}),
        param="tool_choice", message="not among the tools")
    # Under auto with a strict tool each call in the text is held (Note
    # [Structural tags]): the text is the model's, and a <tool_call> in it is
    # a call that parses.
    for seed in range(1, 4):
        status, chat = post("/v1/chat/completions", {"messages": asked, "tools": tools, "max_tokens": 60,
                                                     "temperature": 0.8, "seed": seed})
        if status != 200:
            fail(f"strict tools under auto, seed {seed}: HTTP {status}: {chat}")
        reply = chat["choices"][0]
        if "<tool_call>" in (reply["message"].get("content") or "") and reply["finish_reason"] != "length":
            fail(f"strict tools under auto, seed {seed}: a call left as text: {chat}")
    return (f"tool_choice required and a named function gave {whole} of 6 calls whole, each valid; strict tools "
            "under auto served")


def check_choices():
    base = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.9, "seed": 7}
    status, plain = post("/v1/completions", dict(base, n=3, logprobs=0))
    if status != 200:
        fail(f"n 3: HTTP {status}: {plain}")
    if [c["index"] for c in plain["choices"]] != [0, 1, 2]:
        fail(f"n 3: choices {plain['choices']}")
    alone = []
    for i in range(3):
        status, one = post("/v1/completions", dict(base, seed=7 + i, logprobs=0))
        alone.append(one["choices"][0])
        if (one["choices"][0]["text"], one["choices"][0]["logprobs"]) != (plain["choices"][i]["text"],
                                                                           plain["choices"][i]["logprobs"]):
            fail(f"choice {i} of n 3 is not the request of seed {7 + i}: {plain['choices'][i]} vs {one['choices'][0]}")
    generated = sum(len(c["logprobs"]["token_logprobs"]) for c in plain["choices"])
    if plain["usage"]["completion_tokens"] != generated:
        fail(f"n 3: usage {plain['usage']}, {generated} tokens in the choices")
    if len({c["text"] for c in plain["choices"]}) == 1:
        fail("n 3: three equal choices at temperature 0.9")
    # Streamed: each index's pieces joined are its plain text, one finish reason each.
    texts, reasons = {}, {}
    for chunk in stream("/v1/completions", dict(base, n=3)):
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"] is not None:
                reasons.setdefault(choice["index"], []).append(choice["finish_reason"])
    for i in range(3):
        if texts.get(i) != plain["choices"][i]["text"] or reasons.get(i) != [plain["choices"][i]["finish_reason"]]:
            fail(f"streamed choice {i}: {texts.get(i)!r} {reasons.get(i)}, plain {plain['choices'][i]}")
    # best_of 3: the one of highest mean log-probability per token.
    status, best = post("/v1/completions", dict(base, best_of=3))
    means = [sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"]) for c in alone]
    if status != 200 or [c["text"] for c in best["choices"]] != [alone[means.index(max(means))]["text"]]:
        fail(f"best_of 3 gave {best}; the choices' mean log-probabilities {means}")
    # Chat: n choices, each with its own index.
    status, chat = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "n": 2,
                                                 "max_tokens": 5, "temperature": 0})
    if status != 200 or [c["index"] for c in chat["choices"]] != [0, 1] or \
            chat["choices"][0]["message"] != chat["choices"][1]["message"]:
        fail(f"chat n 2 (greedy: equal): {chat}")
    # Two prompts, n 2: prompt by prompt, each prompt's choices what it gets alone.
    prompts = [base["prompt"], "The sky"]
    status, batch = post("/v1/completions", dict(base, prompt=prompts, n=2))
    if status != 200 or [c["index"] for c in batch["choices"]] != [0, 1, 2, 3]:
        fail(f"two prompts, n 2: {batch}")
    prompt_tokens = 0
    for p, text in enumerate(prompts):
        status, single = post("/v1/completions", dict(base, prompt=text, n=2))
        prompt_tokens += single["usage"]["prompt_tokens"]
        if [c["text"] for c in single["choices"]] != [c["text"] for c in batch["choices"][2 * p:2 * p + 2]]:
            fail(f"prompt {p} of two: {batch['choices'][2 * p:2 * p + 2]}, alone {single['choices']}")
    if batch["usage"]["prompt_tokens"] != prompt_tokens:
        fail(f"two prompts: usage {batch['usage']}, the prompts alone {prompt_tokens} tokens")
    # echo: the prompt's text first.
    status, echoed = post("/v1/completions", dict(base, echo=True))
    if status != 200 or echoed["choices"][0]["text"] != base["prompt"] + alone[0]["text"]:
        fail(f"echo: {echoed}")
    print(f"PASS: n 3 are the requests of seeds 7, 8, 9, streamed per index; best_of 3 picks the mean log-probability "
          f"{max(means):.3f}; two prompts each as alone; chat n 2; echo")


def check_constrained():
    """Note [Constrained output]: json_object and guided_choice, plain and streamed."""
    choices = ["yes", "no", "maybe so"]
    for seed in range(1, 5):
        body = {"prompt": "Is it raining?", "max_tokens": 16, "temperature": 1.0, "seed": seed,
                "guided_choice": choices}
        status, reply = post("/v1/completions", body)
        if status != 200:
            fail(f"guided_choice: HTTP {status}: {reply}")
        choice = reply["choices"][0]
        if choice["text"] not in choices or choice["finish_reason"] != "stop":
            fail(f"guided_choice seed {seed}: {choice['text']!r} ({choice['finish_reason']}) is not one of {choices}")
        text, reason = completion_text(stream("/v1/completions", body))
        if (text, reason) != (choice["text"], "stop"):
            fail(f"guided_choice seed {seed} streamed: {text!r} ({reason}), plain {choice['text']!r}")
    whole = 0
    for seed in range(1, 7):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Give me a JSON object."}],
                "max_tokens": 120, "temperature": 0.7, "seed": seed, "response_format": {"type": "json_object"}}
        status, reply = post("/v1/chat/completions", body)
        if status != 200:
            fail(f"json_object: HTTP {status}: {reply}")
        content, reason = reply["choices"][0]["message"]["content"], reply["choices"][0]["finish_reason"]
        if reason == "stop":
            try:
                value = json.loads(content)
            except ValueError as error:
                fail(f"json_object seed {seed}: stopped with {content!r}, not JSON: {error}")
            if not isinstance(value, dict):
                fail(f"json_object seed {seed}: {content!r} is not an object")
            whole += 1
        elif reason != "length" or not content.lstrip().startswith("{"):
            fail(f"json_object seed {seed}: {content!r} ({reason})")
        streamed, streamed_reason = chat_text(stream("/v1/chat/completions", body))
        if (streamed, streamed_reason) != (content, reason):
            fail(f"json_object seed {seed} streamed: {streamed!r} ({streamed_reason}), plain {content!r} ({reason})")
    print(f"PASS: guided_choice gave one of {choices} each time; json_object gave {whole} whole objects of 6 "
          "(the others ran to max_tokens inside one), streamed as plain")
    check_json_schema()
    check_structural_tag()


# Note [Structural tags]: a one-letter trigger the model writes all the time;
# every "e" in the text opens "e=", a value of the schema, and ";".
def check_structural_tag():
    held = 0
    for seed in range(1, 4):
        body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.9, "seed": seed,
                "response_format": {"type": "structural_tag", "triggers": ["e"],
                                    "structures": [{"begin": "e=", "schema": {"enum": [1, 2]}, "end": ";"}]}}
        status, reply = post("/v1/completions", body)
        if status != 200:
            fail(f"structural_tag seed {seed}: HTTP {status}: {reply}")
        text, reason = reply["choices"][0]["text"], reply["choices"][0]["finish_reason"]
        rest = re.sub(r"e=\s*[12]\s*;", "", text)  # JSON may have whitespace around the value
        if reason == "length":
            rest = re.sub(r"e(=\s*([12]\s*)?)?$", "", rest)  # cut inside a structure
        if "e" in rest:
            fail(f"structural_tag seed {seed}: an 'e' outside its structure in {text!r} ({reason})")
        held += len(re.findall(r"e=\s*[12]\s*;", text))
        streamed = completion_text(stream("/v1/completions", body))
        if streamed != (text, reason):
            fail(f"structural_tag seed {seed} streamed: {streamed!r}, plain {(text, reason)!r}")
    if held == 0:
        fail("structural_tag: no structure opened in 3 answers: the check checks nothing")
    expect_error("a trigger that opens nothing", 400, *post("/v1/completions", {
        "prompt": "x", "response_format": {"type": "structural_tag", "triggers": ["<"], "structures": [
            {"begin": "[", "schema": {}, "end": "]"}]}}), param="response_format", message="begins no structure")
    print(f"PASS: structural_tag held {held} structures in 3 free-text answers, streamed as plain; a trigger that "
          "opens nothing is a 400")


# Note [JSON schemas for constrained output]: a schema as OpenAI's
# response_format and as vLLM's guided_json; each whole answer validates
# (checked here by hand: Debian's Python has no jsonschema by default).
ANSWER_SCHEMA = {"type": "object", "properties": {
    "answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 5},
    "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5},
    "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}, "day": {"type": "string", "format": "date"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
    "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]}},
    "required": ["answer", "confidence", "weight", "code", "day", "note"], "additionalProperties": False}
DAY = re.compile(r"^[1-9][0-9]{3}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
                 r"02-(0[1-9]|1[0-9]|2[0-8]))$")


def answer_problem(value):
    if not isinstance(value, dict):
        return "not an object"
    order = [k for k in ["answer", "confidence", "weight", "code", "day", "tags", "note"] if k in value]
    if list(value) != order or not {"answer", "confidence", "weight", "code", "day", "note"} <= set(value):
        return f"keys {list(value)}"
    if not isinstance(value["code"], str) or not re.search(r"^[A-Z]{2}-\d{3}$", value["code"]):
        return "code (pattern)"
    try:  # format date, read as Python reads ISO dates
        datetime.date.fromisoformat(value["day"])
    except (TypeError, ValueError):
        return "day (format date)"
    if not DAY.search(value["day"]):
        return "day (the RFC 3339 form)"
    if value["answer"] not in ("yes", "no"):
        return "answer"
    if not isinstance(value["confidence"], int) or isinstance(value["confidence"], bool) or \
            not 0 <= value["confidence"] <= 100 or value["confidence"] % 5:
        return "confidence"
    if not isinstance(value["weight"], (int, float)) or isinstance(value["weight"], bool) or \
            not 0 < value["weight"] <= 2.5:  # Note [Number bounds]: compared as Python compares
        return "weight"
    tags = value.get("tags", [])
    if not isinstance(tags, list) or len(tags) > 2 or any(not isinstance(t, str) or len(t) > 6 for t in tags):
        return "tags"
    if value["note"] is not None and (not isinstance(value["note"], str) or len(value["note"]) > 8):
        return "note"
    return None


def check_json_schema():
    whole = 0
    for seed in range(1, 7):
        if seed % 2:
            path, body = "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "Is it raining? Answer in JSON."}],
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "answer", "strict": True, "schema": ANSWER_SCHEMA}}}
        else:
            path, body = "/v1/completions", {"prompt": "Is it raining? Answer in JSON:", "guided_json": ANSWER_SCHEMA}
        body.update({"max_tokens": 200, "temperature": 0.8, "seed": seed})
        status, reply = post(path, body)
        if status != 200:
            fail(f"json_schema seed {seed}: HTTP {status}: {reply}")
        choice = reply["choices"][0]
        content = choice["message"]["content"] if "message" in choice else choice["text"]
        reason = choice["finish_reason"]
        if reason == "stop":
            try:
                value = json.loads(content)
            except ValueError as error:
                fail(f"json_schema seed {seed}: stopped with {content!r}, not JSON: {error}")
            problem = answer_problem(value)
            if problem:
                fail(f"json_schema seed {seed}: {content!r} does not validate: {problem}")
            whole += 1
        elif reason != "length" or not content.lstrip().startswith("{"):
            fail(f"json_schema seed {seed}: {content!r} ({reason})")
        events = stream(path, body)
        streamed = chat_text(events) if "messages" in body else completion_text(events)
        if streamed != (content, reason):
            fail(f"json_schema seed {seed} streamed: {streamed!r}, plain {(content, reason)!r}")
    if whole == 0:
        fail("json_schema: no answer of 6 whole within 200 tokens")
    print(f"PASS: json_schema (response_format and guided_json) gave {whole} of 6 answers whole, each valid against "
          "the schema, streamed as plain")


def expect_error(label, status_wanted, status, body, param=None, code=None, message=None):
    error = body.get("error") if isinstance(body, dict) else None
    if status != status_wanted or not error or set(error) != {"message", "type", "param", "code"}:
        fail(f"{label}: HTTP {status} {body}, expected {status_wanted} with an OpenAI error body")
    if param is not None and error["param"] != param:
        fail(f"{label}: param {error['param']!r}, expected {param!r}: {error}")
    if code is not None and error["code"] != code:
        fail(f"{label}: code {error['code']!r}, expected {code!r}")
    if message is not None and message not in error["message"]:
        fail(f"{label}: message {error['message']!r} lacks {message!r}")


def check_errors():
    expect_error("no key", 401, *post("/v1/completions", {"prompt": "x"}, key=""), code="invalid_api_key")
    expect_error("wrong key", 401, *post("/v1/completions", {"prompt": "x"}, key="0" * 64), code="invalid_api_key")
    expect_error("bad JSON", 400, *post("/v1/completions", None, raw=b'{"prompt": "x",}'), message="the request body:1:")
    expect_error("max_tokens 0", 400, *post("/v1/completions", {"prompt": "x", "max_tokens": 0}), param="max_tokens")
    expect_error("n 200", 400, *post("/v1/completions", {"prompt": "x", "n": 200}), param="n")
    expect_error("best_of < n", 400, *post("/v1/completions", {"prompt": "x", "n": 3, "best_of": 2}), param="best_of")
    expect_error("top_logprobs alone", 400, *post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                                            "top_logprobs": 2}), param="top_logprobs")
    expect_error("unknown field", 400, *post("/v1/completions", {"prompt": "x", "temprature": 1}), param="temprature")
    expect_error("json_schema keyword", 400, *post("/v1/completions", {"prompt": "x", "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {"properties": {"n": {"type": "array",
                                                                                            "uniqueItems": True}}}}}}),
                 param="response_format", message="schema/properties/n: 'uniqueItems' is not supported")
    expect_error("guided_json and guided_choice", 400,
                 *post("/v1/completions", {"prompt": "x", "guided_json": {}, "guided_choice": ["a"]}),
                 param="guided_choice", message="give one")
    expect_error("stop with a form", 400,
                 *post("/v1/completions", {"prompt": "x", "guided_choice": ["a"], "stop": ["}"]}), param="stop",
                 message="a stop string inside it would cut it")
    expect_error("no token can begin the choice", 400,
                 *post("/v1/completions", {"prompt": "x", "guided_choice": ["\ufffd"]}), param="guided_choice",
                 message="no token of the vocabulary can begin any of the choices")
    long_prompt = " ".join(["apple river stone"] * 3000)
    expect_error("over-long prompt", 400, *post("/v1/completions", {"prompt": long_prompt}), param="prompt",
                 code="context_length_exceeded")
    expect_error("over-long max_tokens", 400, *post("/v1/completions", {"prompt": "x", "max_tokens": 100000}),
                 param="max_tokens", code="context_length_exceeded")
    expect_error("token id", 400, *post("/v1/completions", {"prompt": [1, 10 ** 6]}), param="prompt",
                 message="vocabulary")
    expect_error("model", 404, *post("/v1/completions", {"model": "gpt-4", "prompt": "x"}), param="model",
                 code="model_not_found")
    expect_error("chat role", 400, *post("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}),
                 param="messages", message="messages[0].role")
    # Note [Bounded request bodies]: bodies that could grow without bound are
    # refused before they are read, on any path, before the key.
    for label, path, headers, body, wanted in [
            ("a chunked body", "/v1/completions", {"Transfer-Encoding": "chunked"}, b"4\r\n{}{}\r\n0\r\n\r\n", 411),
            ("a chunked body to no route", "/x", {"Transfer-Encoding": "chunked"}, b"0\r\n\r\n", 411),
            ("no Content-Length", "/v1/completions", {}, None, 411),
            ("a gzip body", "/v1/completions", {"Content-Encoding": "gzip", "Content-Length": "2"}, b"{}", 415)]:
        connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=30)
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        expect_error(label, wanted, response.status, json.loads(response.read()), message="is not read")
        if response.getheader("Connection") != "close":
            fail(f"{label}: the connection is kept open after the refusal")
        connection.close()
    try:
        urllib.request.urlopen(URL + "/v1/engines", timeout=30)
        fail("GET /v1/engines answered 200")
    except urllib.error.HTTPError as error:
        if error.code != 401:  # /v1/ routes need the key before anything else
            fail(f"GET /v1/engines without a key: HTTP {error.code}")
    request = urllib.request.Request(URL + "/nope", headers={"Authorization": f"Bearer {KEY}"})
    try:
        urllib.request.urlopen(request, timeout=30)
        fail("GET /nope answered 200")
    except urllib.error.HTTPError as error:
        expect_error("no route", 404, error.code, json.loads(error.read()), message="this server answers")
    request = urllib.request.Request(URL + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        models = json.loads(response.read())
    if [m["id"] for m in models["data"]] != [MODEL]:
        fail(f"/v1/models: {models}")
    print("PASS: 401 without or with a wrong key; 400 naming the field for bad JSON, ranges, unknown fields, "
          "over-long prompts; 404 for another model and unknown routes; 411/415 for chunked, unsized or "
          "compressed bodies")


def await_cancelled(before, what):
    """Waits until one more request ended cancelled and every block is free again."""
    cancelled = 'dsserve_requests_total{finish_reason="cancelled"}'
    deadline = time.monotonic() + 60
    while True:
        now = metrics()
        if (now[cancelled] == before[cancelled] + 1 and now["dsserve_running_requests"] == 0 and
                now["dsserve_kv_cache_free_blocks"] == now["dsserve_kv_cache_blocks"]):
            break
        if time.monotonic() > deadline:
            fail(f"{what}: after 60 s cancelled {now[cancelled]} (before {before[cancelled]}), running "
                 f"{now['dsserve_running_requests']}, free blocks {now['dsserve_kv_cache_free_blocks']} of "
                 f"{now['dsserve_kv_cache_blocks']}")
        time.sleep(0.05)
    generated = now["dsserve_generation_tokens_total"] - before["dsserve_generation_tokens_total"]
    if generated >= 4000:
        fail(f"{what}: {generated:.0f} tokens generated, the whole request")
    return generated


def check_disconnect():
    body = {"prompt": "Once", "max_tokens": 4000, "ignore_eos": True}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    # Streaming: the server notices at its next write.
    before = metrics()
    connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=120)
    connection.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)), headers)
    response = connection.getresponse()
    first = response.readline()
    if not first.startswith(b"data: "):
        fail(f"disconnect: the first line {first!r}")
    connection.sock.close()  # the client goes away mid-stream
    connection.close()
    generated = await_cancelled(before, "disconnect")
    print(f"PASS: a client gone mid-stream: its request cancelled after {generated:.0f} of 4000 tokens, "
          "every cache block free again")
    # Not streaming: nothing is written before the end, the server watches
    # the connection (Note [A non-streaming client that goes away]).
    before = metrics()
    connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=120)
    connection.request("POST", "/v1/completions", json.dumps(body), headers)
    deadline = time.monotonic() + 60
    while metrics()["dsserve_generation_tokens_total"] == before["dsserve_generation_tokens_total"]:
        if time.monotonic() > deadline:
            fail("non-streaming disconnect: no token generated in 60 s")
        time.sleep(0.05)
    connection.sock.close()  # the client gives up before the answer
    connection.close()
    generated = await_cancelled(before, "non-streaming disconnect")
    print(f"PASS: a client gone before its non-streaming answer: its request cancelled after {generated:.0f} of "
          "4000 tokens, every cache block free again")


MODEL = None
if __name__ == "__main__":
    if sys.argv[3] == "same_text":
        check_same_text(sys.argv[4], sys.argv[5])
        sys.exit(0)
    with urllib.request.urlopen(urllib.request.Request(URL + "/v1/models",
                                                       headers={"Authorization": f"Bearer {KEY}"}), timeout=30) as r:
        MODEL = json.loads(r.read())["data"][0]["id"]
    check, args = sys.argv[3], sys.argv[4:]
    {"greedy": lambda: check_greedy(args[0], args[1]),
     "same_text": lambda: check_same_text(args[0], args[1]),
     "concurrent": lambda: check_concurrent(int(args[0])),
     "chat": check_chat,
     "logprobs": lambda: check_logprobs(args[0], args[1]),
     "choices": check_choices,
     "jinja_chat": lambda: check_jinja_chat(args[0]),
     "tools": lambda: check_tools(args[0], args[1]),
     "prompt_logprobs": lambda: check_prompt_logprobs(args[0], args[1]),
     "errors": check_errors,
     "constrained": check_constrained,
     "disconnect": check_disconnect}[check]()
