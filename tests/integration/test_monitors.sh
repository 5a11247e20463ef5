#!/usr/bin/env bash
# The ds_config's monitors through dslaunch and dsrank (Note [Monitor
# metrics] in runtime/monitor/training_monitors.h): TensorBoard event files
# read by an independent reader (tests/monitor/read_tfevents.py, written
# from the format, every CRC checked) agree with the CSV files and with the
# losses dsrank logs; CSV values are written as DeepSpeed's Python writes
# them; a job restarted from a checkpoint leaves each step once in the CSV
# and, after TensorBoard's purge of a restart, in the event files; wandb is
# refused with the way round; a monitor folder that cannot be made stops the
# job naming it.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
READER=$(cd "$(dirname "$0")/../monitor" && pwd)/read_tfevents.py
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.steps=8 --override train.warmup_steps=2
  --override train.eval_interval=4 --override train.eval_steps=2 --override ds_config.steps_per_print=4
  --override ds_config.wall_clock_breakdown=true)
monitors() {  # FOLDER: both monitors into FOLDER
  echo --override ds_config.tensorboard.enabled=true --override "ds_config.tensorboard.output_path=$1"
  echo --override ds_config.tensorboard.job_name=tb --override ds_config.csv_monitor.enabled=true
  echo --override "ds_config.csv_monitor.output_path=$1" --override ds_config.csv_monitor.job_name=csv
}

run() {  # NAME [dslaunch arguments...]; RANK_ARGS: dsrank's own, after the job file
  local name=$1
  shift
  "$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "$@" "$CONFIG" --quiet_config --loss_log "$WORK/$name.tsv" ${RANK_ARGS:-} \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name exited $?: $(tail -3 "$WORK/$name.err")"
}

# Checks FOLDER's monitors against the loss log NAME.tsv; prints a summary.
check() {  # NAME FOLDER
  python3 - "$WORK/$1.tsv" "$2" "$READER" <<'PY'
import csv, json, math, os, struct, subprocess, sys
tsv, folder, reader = sys.argv[1:]
losses = [float(line.split("\t")[1]) for line in open(tsv)]
def rows(metric):
    path = os.path.join(folder, "csv", metric.replace("/", "_") + ".csv")
    with open(path) as f:
        table = list(csv.reader(f))
    assert table[0] == ["step", metric.split("/")[-1]], (path, table[0])
    for step, value in table[1:]:
        # DeepSpeed writes Python floats with repr(): the same text here.
        assert value == repr(float(value)), (path, value)
    return [(int(s), float(v)) for s, v in table[1:]]
train = rows("Train/Samples/train_loss")
steps = [s for s, _ in train]
batch = steps[0]
assert steps == [batch * (i + 1) for i in range(len(losses))], ("one row per step, x = samples", steps)
for (s, v), logged in zip(train, losses):
    assert abs(v - logged) <= 1e-8 * abs(logged), ("CSV loss differs from the loss log", s, v, logged)
for metric in ("Train/Samples/lr", "Train/Samples/grad_norm", "Train/Samples/skipped_steps",
               "Train/Samples/samples_per_second", "Train/Samples/tokens_per_second",
               "Train/Samples/elapsed_time_ms_step", "Memory/host_peak_rss_gib"):
    got = rows(metric)
    assert [s for s, _ in got] == steps, (metric, got)
    assert all(math.isfinite(v) for _, v in got), (metric, got)
assert all(v > 0 for _, v in rows("Train/Samples/grad_norm"))
tokens = dict(rows("Train/Samples/tokens_per_second"))
samples = dict(rows("Train/Samples/samples_per_second"))
for s in steps:
    assert abs(tokens[s] - 64 * samples[s]) <= 1e-6 * tokens[s], ("tokens/s = 64 x samples/s", s)
evals = rows("Eval/Samples/eval_loss")
assert [s for s, _ in evals] == [4 * batch, 8 * batch], evals

out = subprocess.run([sys.executable, reader, os.path.join(folder, "tb"), "--purge"], check=True,
                     capture_output=True, text=True).stdout
events = [json.loads(line) for line in out.splitlines()]
assert events[0].get("file_version") == "brain.Event:2", events[0]
scalars = {}
for e in events:
    for tag, value in e.get("scalars", {}).items():
        scalars.setdefault(tag, []).append((e["step"], value))
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
for metric in ("Train/Samples/train_loss", "Train/Samples/lr", "Eval/Samples/eval_loss"):
    want = [(s, f32(v)) for s, v in rows(metric)]
    assert scalars[metric] == want, ("event files and CSV differ", metric, scalars[metric], want)
starts = [e["step"] for e in events if e.get("session_log") == "START"]
print("%d steps of %d samples; %d event file(s), START at %s; %d scalar tags" %
      (len(steps), batch, len({e["file"] for e in events}), starts, len(scalars)))
PY
}

run plain $(monitors "$WORK/mon") --override 'checkpoint.dir=""'
grep -q "dsrank: tensorboard: $WORK/mon/tb/events.out.tfevents\." "$WORK/plain.out" || fail "the event file is not named"
grep -q "dsrank: csv_monitor: $WORK/mon/csv/<metric>.csv" "$WORK/plain.out" || fail "the CSV folder is not named"
summary=$(check plain "$WORK/mon") || fail "the monitors of a plain run: $summary"
pass "tensorboard and csv_monitor agree with the loss log: $summary"

# A rank that fails after step 6 restarts from step 4: each step once.
RANK_ARGS="--exit_at_step 6" run restarted $(monitors "$WORK/mon-restart") --override "checkpoint.dir=$WORK/ck" \
  --override checkpoint.interval=4 --max_restarts 1
grep -q 'resumed from .*global_step4' "$WORK/restarted.out" || fail "the restart did not resume from global_step4"
tail -n 4 "$WORK/restarted.tsv" >"$WORK/restarted-last.tsv"
head -n 4 "$WORK/restarted.tsv" | cat - "$WORK/restarted-last.tsv" >"$WORK/restarted-once.tsv"
mv "$WORK/restarted-once.tsv" "$WORK/restarted.tsv"
summary=$(check restarted "$WORK/mon-restart") || fail "the monitors of a restarted run: $summary"
[[ $summary == *"2 event file(s)"* ]] || fail "expected one event file per attempt: $summary"
pass "a restarted job leaves each step once: $summary"

# wandb: refused at its key, with the way round.
set +e
"$DSLAUNCH" --validate "$CONFIG" --override ds_config.wandb.enabled=true >"$WORK/wandb.out" 2>"$WORK/wandb.err"
code=$?
set -e
((code == 2)) || fail "wandb.enabled=true: exit $code"
grep -q "wandb.enabled: dslaunch does not write W&B runs.*wandb sync --sync-tensorboard" "$WORK/wandb.err" ||
  fail "wandb is not refused with the way round: $(cat "$WORK/wandb.err")"
pass "wandb is refused at its key, naming wandb sync --sync-tensorboard"

# A monitor folder under a file cannot be made: the job stops, naming it.
touch "$WORK/a-file"
set +e
"$DSLAUNCH" --num_gpus 1 "${COMMON[@]}" --override ds_config.csv_monitor.enabled=true \
  --override "ds_config.csv_monitor.output_path=$WORK/a-file" --override 'checkpoint.dir=""' "$CONFIG" \
  >"$WORK/blocked.out" 2>"$WORK/blocked.err"
code=$?
set -e
((code != 0)) || fail "a job whose monitor folder cannot be made succeeded"
grep -q "$WORK/a-file" "$WORK/blocked.out" "$WORK/blocked.err" || fail "the folder is not named: $(tail -3 "$WORK/blocked.err")"
grep -q "step=1 " "$WORK/blocked.out" && fail "a step ran before the monitor error"
pass "a monitor folder that cannot be made stops the job before step 1, naming it"
