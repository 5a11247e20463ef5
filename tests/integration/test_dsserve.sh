#!/usr/bin/env bash
# dsserve (issue 20, Note [OpenAI-compatible serving]) on a tiny Llama folder
# with its SentencePiece tokenizer (tests/hf/make_tiny_instruct.py), asked
# by curl and by a small Python client (dsserve_client.py):
#  - the greedy completion is dsgen's, plain and streamed;
#  - 64 concurrent streaming requests (completions and chats, sampled with
#    seeds) all end, each with what the same request gets alone;
#  - chat completions stream what they answer unstreamed; a folder's own
#    Jinja chat template serves chats as jinja2 renders them;
#  - log-probabilities (the greedy tokens' equal dsgen's; a prompt's, asked
#    as lm-eval-harness asks, equal the training forward's), n choices (each
#    the single request of its seed), best_of's pick and echo;
#  - bad input gets OpenAI's error body naming the field (400), a missing
#    key 401, another model 404; bad flags stop dsserve before it serves;
#  - a client that goes away, mid-stream or before its non-streaming
#    answer, frees its sequence;
#  - with the decoder layers streamed from host memory (--offload_params
#    cpu, ZeRO-Inference) the greedy completion is still dsgen's;
#  - /metrics parses with the Prometheus client library; SIGTERM exits 0;
#  - a full fine-tune's ZeRO-3 checkpoint of 2 ranks serves with no
#    conversion (dsgen's continuation from the same checkpoint); a LoRA
#    checkpoint is refused, naming what to serve instead.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
: "${DSSERVE:?DSSERVE must point at the dsserve binary}"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CLIENT=$(cd "$(dirname "$0")" && pwd)/dsserve_client.py
command -v curl >/dev/null || fail "no curl"
# The tiny instruction setup: $WORK/ti/model (a random Llama folder with its
# SentencePiece tokenizer), CONFIG and COMMON for its fine-tuning job.
source "$(dirname "$0")/llama_instruct_setup.sh"
MODEL=$WORK/ti/model
# Random weights work at any length: a long context lets one request run long
# enough to be cancelled mid-stream.
"$PY" -c 'import json, sys
p = sys.argv[1] + "/config.json"; c = json.load(open(p)); c["max_position_embeddings"] = 4096
json.dump(c, open(p, "w"), indent=2)' "$MODEL"
cat >"$WORK/chat.yaml" <<'YAML'
system: {prefix: "<<SYS>>\n", suffix: "\n<</SYS>>\n\n"}
user: {prefix: "[INST] ", suffix: " [/INST]"}
assistant: {prefix: " ", suffix: " </s>"}
YAML
new_token "$WORK/key"
chmod 600 "$WORK/key"

# 1. Bad flags and files stop dsserve before it serves, naming what is wrong.
expect_refusal() {  # LABEL PATTERN ARGS...
  local label=$1 pattern=$2 out
  shift 2
  if out=$(timeout 120 "$DSSERVE" "$@" 2>&1); then fail "$label: dsserve started: $out"; fi
  grep -q -- "$pattern" <<<"$out" || fail "$label: '$out' does not say '$pattern'"
}
expect_refusal "no folder" "$WORK/nope" --model "$WORK/nope" --listen 127.0.0.1:0
expect_refusal "bad --listen" "--listen" --model "$MODEL" --listen nonsense
cp "$WORK/key" "$WORK/open-key" && chmod 644 "$WORK/open-key"
expect_refusal "readable key" "--api_key_file" --model "$MODEL" --listen 127.0.0.1:0 --api_key_file "$WORK/open-key"
printf 'user: {prefix: "a"}\nassistant: {prefix: "b"}\nrole: {}\n' >"$WORK/bad-chat.yaml"
expect_refusal "bad template" "bad-chat.yaml" --model "$MODEL" --listen 127.0.0.1:0 --chat_template "$WORK/bad-chat.yaml"
expect_refusal "flag" "--max_sequence" --model "$MODEL" --max_sequence 4
pass "bad flags, a missing folder, a readable key file and a bad chat template stop dsserve, named"

# start_server NAME COMMAND...: runs a dsserve (or dslaunch of one) in the
# background, output in NAME.out and NAME.err; sets SERVER (its pid) and URL
# once it prints its "serving" line.
start_server() {
  local name=$1
  shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  SERVER=$!
  CLEANUP_PIDS+=("$SERVER")
  wait_until 180 grep -q "dsserve: serving" "$WORK/$name.out" ||
    fail "$name did not start: $(cat "$WORK/$name.out" "$WORK/$name.err")"
  line=$(grep -m1 "dsserve: serving" "$WORK/$name.out")
  [[ $line =~ on\ (http://127\.0\.0\.1:[0-9]+) ]] || fail "no address in '$line'"
  URL=${BASH_REMATCH[1]}
}

# greedy_completion NAME EXPECTED: the greedy completion of $prompt (8
# tokens) from $URL, in NAME.json, must be the continuation dsgen printed in
# EXPECTED; prints the client's verdict.
greedy_completion() {
  local name=$1 expected=$2
  curl -sS -H "Authorization: Bearer $(cat "$WORK/key")" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0}" "$URL/v1/completions" >"$WORK/$name.json"
  "$PY" "$CLIENT" "$URL" "$WORK/key" same_text "$WORK/$name.json" "$expected" ||
    fail "$name: the completion $(cat "$WORK/$name.json") is not the one in $expected"
}

# 2. Serve.
start_server serve "$DSSERVE" --model "$MODEL" --listen 127.0.0.1:0 --served_model_name tiny-llama \
  --chat_template "$WORK/chat.yaml" --api_key_file "$WORK/key" --max_sequences 16 --max_tokens_per_step 256 \
  --cache_positions 8192 --max_queue 128
[[ $line =~ probe:\ [0-9]+\ positions ]] || fail "no probe figures in '$line'"
pass "dsserve serves at $URL after its logit probe: ${line#*(}"
expect_refusal "port in use" "cannot bind" --model "$MODEL" --listen "${URL#http://}"

# 3. curl: health, a greedy completion equal to dsgen's continuation.
[[ $(curl -sS "$URL/health") == ok ]] || fail "/health: $(curl -sS "$URL/health")"
prompt="Name a color of the sky."
"$DSGEN" --model "$MODEL" --prompt "$prompt" --max_new_tokens 8 >"$WORK/dsgen.out" 2>&1 || fail "dsgen: $(cat "$WORK/dsgen.out")"
greedy_completion curl "$WORK/dsgen.out" >"$WORK/same.log"
status=$(curl -sS -o "$WORK/401.json" -w '%{http_code}' -d '{"prompt": "x"}' "$URL/v1/completions")
[[ $status == 401 ]] && grep -q invalid_api_key "$WORK/401.json" || fail "no key: HTTP $status $(cat "$WORK/401.json")"
pass "curl: /health, a greedy completion equal to dsgen's ($(cat "$WORK/same.log")), 401 without the key"

# 4. The Python client.
"$PY" "$CLIENT" "$URL" "$WORK/key" greedy "$prompt" "$WORK/dsgen.out"
"$PY" "$CLIENT" "$URL" "$WORK/key" concurrent 64
"$PY" "$CLIENT" "$URL" "$WORK/key" chat
"$DSGEN" --model "$MODEL" --prompt "$prompt" --max_new_tokens 8 --print_logprobs >"$WORK/dsgen_logprobs.out" 2>&1 ||
  fail "dsgen --print_logprobs: $(cat "$WORK/dsgen_logprobs.out")"
"$PY" "$CLIENT" "$URL" "$WORK/key" logprobs "$prompt" "$WORK/dsgen_logprobs.out"
"$PY" "$CLIENT" "$URL" "$WORK/key" choices
score_ids=1,20,100,41,5,17,99,200,33
"$DSGEN" --model "$MODEL" --prompt_ids "$score_ids" --max_new_tokens 0 --dump_logits "$WORK/score.logits" \
  >"$WORK/score.out" 2>&1 || fail "dsgen --dump_logits: $(cat "$WORK/score.out")"
"$PY" "$CLIENT" "$URL" "$WORK/key" prompt_logprobs "$score_ids" "$WORK/score.logits"
"$PY" "$CLIENT" "$URL" "$WORK/key" errors
"$PY" "$CLIENT" "$URL" "$WORK/key" constrained
# dsgen's --choice and --json hold its continuation to the same forms.
"$DSGEN" --model "$MODEL" --prompt "Is it raining?" --max_new_tokens 16 --temperature 1.0 --seed 1 \
  --choice "yes|no|maybe so" >"$WORK/dsgen_choice.out" 2>&1 || fail "dsgen --choice: $(cat "$WORK/dsgen_choice.out")"
case "$(tail -n 1 "$WORK/dsgen_choice.out")" in
  yes | no | "maybe so") ;;
  *) fail "dsgen --choice gave '$(tail -n 1 "$WORK/dsgen_choice.out")'" ;;
esac
"$DSGEN" --model "$MODEL" --prompt "A JSON object:" --max_new_tokens 60 --temperature 0.7 --seed 2 --json \
  >"$WORK/dsgen_json.out" 2>&1 || fail "dsgen --json: $(cat "$WORK/dsgen_json.out")"
"$PY" - "$WORK/dsgen_json.out" <<'PYTHON' || fail "dsgen --json: $(cat "$WORK/dsgen_json.out")"
import json, sys
text = open(sys.argv[1]).read()
text = text[:-1] if text.endswith("\n") else text  # dsgen's newline after the continuation (which may hold newlines)
try:
    assert isinstance(json.loads(text), dict)
except ValueError:
    assert text.lstrip().startswith("{"), text  # ran to --max_new_tokens inside the object
PYTHON
cat >"$WORK/answer.schema.json" <<'SCHEMA'
{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "score": {"type": "integer"}},
 "required": ["answer", "score"], "additionalProperties": false}
SCHEMA
"$DSGEN" --model "$MODEL" --prompt "A JSON answer:" --max_new_tokens 60 --temperature 0.7 --seed 3 \
  --json_schema "$WORK/answer.schema.json" >"$WORK/dsgen_schema.out" 2>&1 ||
  fail "dsgen --json_schema: $(cat "$WORK/dsgen_schema.out")"
"$PY" - "$WORK/dsgen_schema.out" <<'PYTHON' || fail "dsgen --json_schema: $(cat "$WORK/dsgen_schema.out")"
import json, sys
text = open(sys.argv[1]).read()
text = text[:-1] if text.endswith("\n") else text  # dsgen's newline after the continuation (which may hold newlines)
try:
    value = json.loads(text)
except ValueError:
    assert text.lstrip().startswith("{"), text  # ran to --max_new_tokens inside the object
else:
    assert list(value) == ["answer", "score"] and value["answer"] in ("yes", "no"), value
    assert isinstance(value["score"], int), value
PYTHON
# --structural_tag: free text in which each "e" opens "e=" a number of the
# schema's bounds, closed by ";" (Note [Structural tags], Note [Number bounds]).
cat >"$WORK/tag.json" <<'TAG'
{"structures": [{"begin": "e=", "schema": {"type": "number", "exclusiveMinimum": -1, "maximum": 0.5}, "end": ";"}],
 "triggers": ["e"]}
TAG
"$DSGEN" --model "$MODEL" --prompt "Once upon a time" --max_new_tokens 60 --temperature 0.9 --seed 5 \
  --structural_tag "$WORK/tag.json" >"$WORK/dsgen_tag.out" 2>&1 || fail "dsgen --structural_tag: $(cat "$WORK/dsgen_tag.out")"
"$PY" - "$WORK/dsgen_tag.out" <<'PYTHON' || fail "dsgen --structural_tag: $(cat "$WORK/dsgen_tag.out")"
import re, sys
text = open(sys.argv[1]).read()
text = text[:-1] if text.endswith("\n") else text
held = re.findall(r"e=\s*(-?[0-9.]+)\s*;", text)
assert held, f"no structure opened: the check checks nothing: {text!r}"
assert all(-1 < float(v) <= 0.5 for v in held), held
rest = re.sub(r"e=\s*-?[0-9.]+\s*;", "", text)
rest = re.sub(r"e(=\s*-?[0-9.]*)?$", "", rest)  # cut inside a structure at --max_new_tokens
assert "e" not in rest, f"an 'e' outside its structure: {text!r}"
PYTHON
echo '{"structures": [{"begin": "e=", "schema": {"type": "number", "multipleOf": 0.5}, "end": ";"}], "triggers": ["e"]}' \
  >"$WORK/bad.tag.json"
"$DSGEN" --model "$MODEL" --prompt "x" --structural_tag "$WORK/bad.tag.json" >"$WORK/dsgen_bad_tag.out" 2>&1 &&
  fail "dsgen --structural_tag with an unsupported keyword ran"
grep -q "bad.tag.json.structures\[0\].schema: schema/multipleOf: 0.5 is not held" "$WORK/dsgen_bad_tag.out" ||
  fail "dsgen --structural_tag, bad schema: $(cat "$WORK/dsgen_bad_tag.out")"
echo '{"type": "string", "format": "uri"}' >"$WORK/bad.schema.json"
"$DSGEN" --model "$MODEL" --prompt "x" --json_schema "$WORK/bad.schema.json" >"$WORK/dsgen_bad_schema.out" 2>&1 &&
  fail "dsgen --json_schema with an unsupported keyword ran"
grep -q "bad.schema.json: schema/format: format 'uri' is not supported" "$WORK/dsgen_bad_schema.out" ||
  fail "dsgen --json_schema, bad schema: $(cat "$WORK/dsgen_bad_schema.out")"
"$DSGEN" --model "$MODEL" --prompt_ids 1,2 --json >"$WORK/dsgen_ids_json.out" 2>&1 &&
  fail "dsgen --json with --prompt_ids ran"
grep -q -- "--json goes with --prompt" "$WORK/dsgen_ids_json.out" || fail "dsgen --json --prompt_ids: $(cat "$WORK/dsgen_ids_json.out")"
pass "dsgen --choice gave '$(tail -n 1 "$WORK/dsgen_choice.out")'; --json a JSON object, --json_schema a valid answer (or their start at the token limit) and --structural_tag numbers in range in free text; an unsupported keyword and --json without --prompt refused"
"$PY" "$CLIENT" "$URL" "$WORK/key" disconnect

# 5. /metrics through an independent parser; nothing left running.
curl -sS "$URL/metrics" >"$WORK/metrics.txt"
"$PY" - "$WORK/metrics.txt" <<'PYTHON' || fail "/metrics: $(head -40 "$WORK/metrics.txt")"
import sys
from prometheus_client.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(open(sys.argv[1]).read()))
types = {f.name: f.type for f in families}
samples = [s for f in families for s in f.samples]
def value(name, **labels):
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, "%s %s: %d samples" % (name, labels, len(found))
    return found[0]
assert types["dsserve_time_to_first_token_seconds"] == "histogram", types
assert types["dsserve_requests"] == "counter", types
assert value("dsserve_time_to_first_token_seconds_count") >= 64, "fewer first tokens than requests"
assert value("dsserve_requests_total", finish_reason="cancelled") == 2
assert value("dsserve_rejected_requests_total", reason="unauthorized") >= 3
assert value("dsserve_rejected_requests_total", reason="bad_request") >= 8
assert value("dsserve_running_requests") == 0 and value("dsserve_queue_depth") == 0
assert value("dsserve_kv_cache_free_blocks") == value("dsserve_kv_cache_blocks")
ended = sum(s.value for s in samples if s.name == "dsserve_requests_total")
print("metrics: %d requests ended, %d tokens generated" % (ended, value("dsserve_generation_tokens_total")))
PYTHON
pass "/metrics parses (prometheus_client): histograms, counters by reason, an idle whole cache"

# 6. SIGTERM: exit 0.
stop_server() {
  kill -TERM "$SERVER"
  wait_until 60 pid_gone "$SERVER" || fail "dsserve did not exit on SIGTERM"
  set +e
  wait "$SERVER"
  code=$?
  set -e
  ((code == 0)) || fail "dsserve exited $code on SIGTERM: $(tail -5 "$WORK"/serve*.err)"
}
stop_server
grep -q "dsserve: stopped" "$WORK/serve.out" || fail "no 'dsserve: stopped'"
pass "SIGTERM: dsserve stopped, exit 0"

# 5b. ZeRO-Inference (Note [Streamed layer weights]): the decoder layers
#     streamed from host memory; the probe passes and the greedy completion
#     is still dsgen's (whole model).
start_server serve_streamed "$DSSERVE" --model "$MODEL" --listen 127.0.0.1:0 --api_key_file "$WORK/key" \
  --offload_params cpu
grep -q "ZeRO-Inference: .* decoder layers' weights in host memory" "$WORK/serve_streamed.err" ||
  fail "dsserve --offload_params cpu did not say where the weights are: $(cat "$WORK/serve_streamed.err")"
greedy_completion streamed "$WORK/dsgen.out" >"$WORK/same_streamed.log"
stop_server
pass "dsserve --offload_params cpu: the probe passes, the greedy completion is dsgen's ($(cat "$WORK/same_streamed.log"))"

# 6a. The folder's own chat template (Note [The folder's chat template]):
#     Llama 2's Jinja template in tokenizer_config.json, no --chat_template.
cp -r "$MODEL" "$WORK/model_jinja"
"$PY" - "$WORK/model_jinja" "$(dirname "$CLIENT")/../serve" <<'PYTHON'
import json, sys
sys.path.insert(0, sys.argv[2])
import chat_templates
path = sys.argv[1] + "/tokenizer_config.json"
config = json.load(open(path))
config["chat_template"] = chat_templates.TEMPLATES["llama2"]
json.dump(config, open(path, "w"), indent=2)
json.dump({"bos_token_id": 1, "eos_token_id": [2]}, open(sys.argv[1] + "/generation_config.json", "w"))
PYTHON
start_server serve_jinja "$DSSERVE" --model "$WORK/model_jinja" --listen 127.0.0.1:0 --api_key_file "$WORK/key"
[[ $line == *"chat template: the folder's"* ]] || fail "the folder's template is not named: '$line'"
"$PY" "$CLIENT" "$URL" "$WORK/key" jinja_chat "$WORK/model_jinja"
tools='"tools": [{"type": "function", "function": {"name": "f"}}]'
status=$(curl -sS -o "$WORK/tools.json" -w '%{http_code}' -H "Authorization: Bearer $(cat "$WORK/key")" \
  -d "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], $tools}" "$URL/v1/chat/completions")
[[ $status == 400 ]] && grep -q -- "--tool_call_parser" "$WORK/tools.json" ||
  fail "tools without --tool_call_parser: HTTP $status $(cat "$WORK/tools.json")"
stop_server
# Tools (Note [Tool calls]): a Hermes-style template and its parser.
start_server serve_tools "$DSSERVE" --model "$WORK/model_jinja" --listen 127.0.0.1:0 --api_key_file "$WORK/key" \
  --chat_template "$(dirname "$CLIENT")/../serve/hermes_tools.jinja" --tool_call_parser hermes
"$PY" "$CLIENT" "$URL" "$WORK/key" tools "$WORK/model_jinja" "$(dirname "$CLIENT")/../serve/hermes_tools.jinja"
stop_server
expect_refusal "a tool parser without a Jinja template" "tools reach the model through a Jinja chat template" \
  --model "$MODEL" --listen 127.0.0.1:0 --chat_template "$WORK/chat.yaml" --tool_call_parser hermes
printf '{%% include "other.jinja" %%}' >"$WORK/bad.jinja"
expect_refusal "bad .jinja" "bad.jinja:1: the statement 'include'" --model "$MODEL" --listen 127.0.0.1:0 \
  --chat_template "$WORK/bad.jinja"
pass "the folder's Jinja chat template serves chats as jinja2 renders them; a template that does not parse stops dsserve; tools need --tool_call_parser and a Jinja template"

# 6b. Tensor-parallel serving (Note [Tensor-parallel serving]): dslaunch
#     with 2 ranks splits the model; rank 0 serves, rank 1 follows its turns.
start_server tp "$DSLAUNCH" --num_gpus 2 --no_prefix "$DSSERVE" --model "$MODEL" --listen 127.0.0.1:0 \
  --api_key_file "$WORK/key" --chat_template "$WORK/chat.yaml" --max_sequences 8 --max_tokens_per_step 128 \
  --cache_positions 8192
LAUNCHER=$SERVER
"$PY" "$CLIENT" "$URL" "$WORK/key" greedy "$prompt" "$WORK/dsgen.out"
"$PY" "$CLIENT" "$URL" "$WORK/key" concurrent 16
"$PY" "$CLIENT" "$URL" "$WORK/key" choices
"$PY" "$CLIENT" "$URL" "$WORK/key" constrained
kill -TERM "$LAUNCHER"
wait_until 60 pid_gone "$LAUNCHER" || fail "dslaunch did not stop the 2-rank dsserve"
set +e
wait "$LAUNCHER"
set -e
grep -q "dsserve: stopped" "$WORK/tp.out" || fail "rank 0 did not stop: $(tail -5 "$WORK/tp.out" "$WORK/tp.err")"
if pgrep -f -- "--model $MODEL --listen" >/dev/null; then fail "a dsserve rank outlived the job"; fi
pass "dsserve on 2 tensor-parallel ranks: one rank's greedy text, 16 concurrent streams each equal to itself alone, n choices, constrained output, stopped whole"

# 7. A training checkpoint serves with no conversion: a full fine-tune (no
#    LoRA) at ZeRO-3 on 2 ranks, read in place by dsserve and by dsgen.
run_job full 2 --override lora.r=0 --override 'lora.target_modules=[]' --override train.steps=3 --override train.warmup_steps=1 \
  --override train.eval_interval=0 --override "checkpoint.dir=$WORK/ck_full" \
  --override ds_config.zero_optimization.stage=3 --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
"$DSGEN" --model "$MODEL" --checkpoint "$WORK/ck_full" --prompt "$prompt" --max_new_tokens 8 >"$WORK/dsgen_ck.out" 2>&1 ||
  fail "dsgen --checkpoint: $(cat "$WORK/dsgen_ck.out")"
cmp -s "$WORK/dsgen_ck.out" "$WORK/dsgen.out" && fail "the fine-tuned checkpoint continues exactly as the base folder"
start_server serve_ck "$DSSERVE" --model "$MODEL" --checkpoint "$WORK/ck_full" --listen 127.0.0.1:0 \
  --api_key_file "$WORK/key"
greedy_completion curl_ck "$WORK/dsgen_ck.out" >"$WORK/same_ck.log"
stop_server
pass "a ZeRO-3 checkpoint of 2 ranks serves in place: $(cat "$WORK/same_ck.log")"

# 8. A LoRA checkpoint holds adapters, not the model: refused, naming the way.
run_job lora 2 --override train.steps=3 --override train.warmup_steps=1 --override train.eval_interval=0 --override "checkpoint.dir=$WORK/ck_lora"
expect_refusal "LoRA checkpoint" "holds LoRA adapters" --model "$MODEL" --checkpoint "$WORK/ck_lora" --listen 127.0.0.1:0
pass "a LoRA checkpoint is refused, naming export.hf_dir and --adapter"
