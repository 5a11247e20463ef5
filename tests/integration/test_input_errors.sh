#!/usr/bin/env bash
# Bad input is an exact error and nothing starts; --dry_run prints the plan.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/pids"
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1
  shift
  set +e
  "$DSLAUNCH" "$@" >"$WORK/err.out" 2>"$WORK/err.err"
  local code=$?
  set -e
  ((code == 2)) || fail "'$*' exited $code, expected 2"
  grep -qF -- "$pattern" "$WORK/err.err" || fail "'$*': message lacks '$pattern': $(cat "$WORK/err.err")"
  (($(count_files "$WORK/pids" '*.pid') == 0)) || fail "'$*' started a rank"
}

expect_error "$WORK/nope" --hostfile "$WORK/nope" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\nworker-1 slot=4\n' >"$WORK/bad_hosts"
expect_error "$WORK/bad_hosts:2: 'worker-1 slot=4'" --hostfile "$WORK/bad_hosts" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\nlocalhost slots=2\n' >"$WORK/dup_hosts"
expect_error "duplicate host 'localhost' (first on line 1)" --hostfile "$WORK/dup_hosts" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\n' >"$WORK/hosts"
expect_error "worker-9" --hostfile "$WORK/hosts" --include worker-9 "$TEST_RANK" --pid_dir "$WORK/pids"
expect_error "slot 5" --hostfile "$WORK/hosts" --exclude localhost:5 "$TEST_RANK" --pid_dir "$WORK/pids"
expect_error "--num_gpu" --num_gpu 2 "$TEST_RANK"
expect_error "missing PROGRAM" --num_gpus 2
pass "input errors name the file, line, flag and text; nothing started"

# Issue 13, finding 7: inputs that crashed or hung dslaunch are refused at once,
# by name (Note [Bounded input files], docs/inputs.md). Each run is bounded by
# `timeout`: a hang is rc 124, a crash 128+signal, and both fail here.
expect_refused() {  # expect_refused PATTERN ARGS...
  local pattern=$1
  shift
  local start=$SECONDS
  set +e
  timeout -k 5 30 "$DSLAUNCH" "$@" >"$WORK/err.out" 2>"$WORK/err.err"
  local code=$?
  set -e
  ((code == 2)) || fail "'$*' exited $code (124: hung; >128: a signal), expected 2"
  ((SECONDS - start <= 10)) || fail "'$*' took $((SECONDS - start)) s to refuse its input"
  grep -qF -- "$pattern" "$WORK/err.err" || fail "'$*': message lacks '$pattern': $(head -c 2000 "$WORK/err.err")"
  (($(wc -c <"$WORK/err.out") == 0)) || fail "'$*' printed $(wc -c <"$WORK/err.out") bytes of output"
  (($(count_files "$WORK/pids" '*.pid') == 0)) || fail "'$*' started a rank"
}
program=("$TEST_RANK" --pid_dir "$WORK/pids")

# Sizes: before, 18 GB RSS then std::bad_alloc; SIGABRT; 59 GB of --dry_run output.
expect_refused "--num_gpus '2147483647': must be in 1..1024" --num_gpus 2147483647 "${program[@]}"
printf 'localhost slots=100000000\n' >"$WORK/huge_hosts"
expect_refused "$WORK/huge_hosts:1: 'localhost slots=100000000': slots=100000000 is more than 1024" \
  --hostfile "$WORK/huge_hosts" "${program[@]}"
printf 'localhost slots=100000\n' >"$WORK/wide_hosts"
expect_refused "slots=100000 is more than 1024" --dry_run --hostfile "$WORK/wide_hosts" "${program[@]}"

# Files that are not regular files: before, SIGABRT after ~9 s (/dev/zero) or a hang.
mkfifo "$WORK/fifo_hosts" "$WORK/fifo.cfg"
mkdir "$WORK/dir_hosts"
for hosts in /dev/zero /dev/urandom "$WORK/fifo_hosts" "$WORK/dir_hosts"; do
  kind="a character device"
  [[ $hosts == "$WORK/fifo_hosts" ]] && kind="a FIFO"
  [[ $hosts == "$WORK/dir_hosts" ]] && kind="a directory"
  expect_refused "hostfile $hosts: is $kind, not a regular file" --hostfile "$hosts" "${program[@]}"
done
ln -s /dev/zero "$WORK/zero.cfg"
expect_refused "job file $WORK/zero.cfg: is a character device, not a regular file" "$WORK/zero.cfg"
expect_refused "job file $WORK/fifo.cfg: is a FIFO, not a regular file" --validate "$WORK/fifo.cfg"
base_job() {  # a job file that --validate accepts, plus the lines given
  cat <<JOB
model: {layers: 2, heads: 2, width: 64, sequence_length: 64}
data: {prepared: data/x}
train: {steps: 10, micro_batch_size: 4}
JOB
  printf '%s\n' "$@"
}
base_job "ds_config: {train_batch_size: auto, train_micro_batch_size_per_gpu: auto}" >"$WORK/good.cfg"
"$DSLAUNCH" --validate "$WORK/good.cfg" >"$WORK/good.out" 2>&1 || fail "the base job file is not valid: $(cat "$WORK/good.out")"
base_job "ds_config: /dev/zero" >"$WORK/ds_zero.cfg"
expect_refused "ds_config: ds_config file /dev/zero: is a character device, not a regular file" \
  --validate "$WORK/ds_zero.cfg"
base_job "ds_config: fifo.cfg" >"$WORK/ds_fifo.cfg"
expect_refused "ds_config file $WORK/fifo.cfg: is a FIFO, not a regular file" "$WORK/ds_fifo.cfg"
head -c $((5 << 20)) /dev/zero | tr '\0' '#' >"$WORK/big.cfg"
expect_refused "job file $WORK/big.cfg: 5242880 bytes; the limit for a job file is 4 MiB" --validate "$WORK/big.cfg"

# Model and batch sizes: before, --validate accepted them and the ranks aborted.
expect_refused "model.layers: 1000000000 must be <= 1024" \
  --validate "$WORK/good.cfg" --override model.layers=1000000000
expect_refused "train.micro_batch_size: 2147483647 must be <= 65536" \
  --validate "$WORK/good.cfg" --override train.micro_batch_size=2147483647
expect_refused "parameters (1024 layers of width 65536" \
  --validate "$WORK/good.cfg" --override model.layers=1024 --override model.width=65536
pass "crashing and hanging inputs are refused at once, by name; nothing started"

# Finding 9: what yaml-cpp accepted silently or reported as "bad file".
printf '{\n  "train_batch_size": 8,\n}\n' >"$WORK/comma.json"
expect_refused "$WORK/comma.json:2:24: trailing comma before '}' (JSON allows none)" --validate "$WORK/comma.json"
base_job "ds_config: comma.json" >"$WORK/comma.cfg"
expect_refused "$WORK/comma.json:2:24: trailing comma" --validate "$WORK/comma.cfg"
{ base_job "ds_config: {train_batch_size: auto, train_micro_batch_size_per_gpu: auto}"; printf -- '---\ntrain: {steps: 99}\n'; } >"$WORK/two_docs.cfg"
expect_refused "$WORK/two_docs.cfg:5: a second YAML document starts here" --validate "$WORK/two_docs.cfg"
{ printf '{"a": '; head -c 1000 /dev/zero | tr '\0' '['; head -c 1000 /dev/zero | tr '\0' ']'; printf '}\n'; } >"$WORK/deep.json"
expect_refused "$WORK/deep.json:1:" --validate "$WORK/deep.json"
grep -qF "nested more than 64 levels deep, the most a config may nest" "$WORK/err.err" || fail "depth message: $(cat "$WORK/err.err")"
pass "trailing commas, second documents and deep nesting are errors naming file:line"

[[ -x ${DSPREP:-} ]] || fail "DSPREP must point at the dsprep binary (got '${DSPREP:-}')"
printf 'some text\n' >"$WORK/corpus.txt"
set +e
timeout -k 5 30 "$DSPREP" --input "$WORK/corpus.txt" --output "$WORK/prep" --tokenizer sentencepiece \
  --sp_model "$WORK/dir_hosts" >"$WORK/dsprep.out" 2>"$WORK/dsprep.err"
code=$?
set -e
((code > 0 && code < 128)) || fail "dsprep --sp_model DIR exited $code (before: std::__ios_failure abort)"
grep -qF "sentencepiece model $WORK/dir_hosts: is a directory, not a regular file" "$WORK/dsprep.err" ||
  fail "dsprep --sp_model DIR: $(cat "$WORK/dsprep.err")"
pass "dsprep --sp_model DIR is an error naming it (exit $code)"

# --output under a regular file: the folder that cannot be is named, nothing written.
set +e
timeout -k 5 30 "$DSPREP" --input "$WORK/corpus.txt" --output "$WORK/corpus.txt/prep" >"$WORK/dsprep.out" 2>"$WORK/dsprep.err"
code=$?
set -e
((code == 1)) || fail "dsprep --output FILE/x exited $code"
grep -qF -- "--output $WORK/corpus.txt/prep: $WORK/corpus.txt is not a folder" "$WORK/dsprep.err" ||
  fail "dsprep --output FILE/x: $(cat "$WORK/dsprep.err")"
pass "dsprep --output under a file is an error naming it"

"$DSLAUNCH" --dry_run --hostfile "$WORK/hosts" --master_port 29611 "$TEST_RANK" --x >"$WORK/dry.out" 2>"$WORK/dry.err" || fail "dry run exited $?"
grep -q '^rank 1: host localhost, local rank 1 of 2, device 1$' "$WORK/dry.out" || fail "dry run placement"
grep -q '^  argv: .*test_rank --local_rank=1 --x$' "$WORK/dry.out" || fail "dry run argv (--local_rank right after the program, as DeepSpeed puts it)"
grep -q '^  MASTER_PORT=29611$' "$WORK/dry.out" || fail "dry run env"
grep -q '^  CUDA_VISIBLE_DEVICES=0,1$' "$WORK/dry.out" || fail "dry run devices"
pass "dry run prints the plan"
