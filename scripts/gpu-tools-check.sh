#!/usr/bin/env bash
# Issue 21's tools on one GPU, on the ~350M GPT of the throughput benchmark
# (ZeRO-2, bf16): the flops profiler (and at ZeRO-3) and the comms logger at
# a profile step, and `dslaunch status` and the controller's and the agent's
# Prometheus endpoints while the job runs.
# Results (logs, the status table, the scraped metrics) land in $OUT (or
# gpu-out/); a check that fails says which and exits 1.
#   bash scripts/gpu-tools-check.sh
set -euo pipefail
export GPU_TARGETS=${GPU_TARGETS:-"dsrank dslaunch dsagent"}
# shellcheck source=scripts/gpu-bench-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu-bench-env.sh"
cd "$root"
common=(--num_gpus 1 --override "data.prepared=$data/fortunes-all-byte" --override model.layers=24
  --override model.heads=16 --override model.width=1024 --override model.vocab_size=50304
  --override train.micro_batch_size=16 --override train.warmup_steps=2 --override checkpoint.interval=0
  --override ds_config.zero_optimization.stage=2)
fail() { echo "FAIL: $*"; exit 1; }
# Checkpoints stay out of $OUT (too many files to bring back).
ck=$(mktemp -d)

# Note [Flops profiler] and Note [Comms logger].
"$bin/dslaunch" "${common[@]}" --override "checkpoint.dir=$ck/tools" --override train.steps=6 \
  --override ds_config.flops_profiler.enabled=true --override ds_config.flops_profiler.profile_step=4 \
  --override ds_config.comms_logger.enabled=true configs/gpt-124m.cfg >"$out/tools.log" 2>&1 ||
  { tail -n 20 "$out/tools.log"; fail "the profiled job"; }
sed 's/^\[[^]]*\] //' "$out/tools.log" | sed -n '/DeepSpeed Flops Profiler/,/^------*$/p' >"$out/flops-profile.txt"
grep -q '^fwd MACs per GPU:' "$out/flops-profile.txt" || fail "no flops profile"
grep -q 'dsrank: comms logger' "$out/tools.log" || fail "no comms logger summary"
echo "== flops profile"; grep -E '^(fwd|bwd|iter|step|samples|params per GPU)' "$out/flops-profile.txt"

# The profiler at ZeRO-3: each layer gathered for its timed pass; the same counts.
"$bin/dslaunch" "${common[@]}" --override "checkpoint.dir=$ck/tools-z3" --override train.steps=6 \
  --override ds_config.zero_optimization.stage=3 --override ds_config.flops_profiler.enabled=true \
  --override ds_config.flops_profiler.profile_step=4 configs/gpt-124m.cfg >"$out/tools-z3.log" 2>&1 ||
  { tail -n 20 "$out/tools-z3.log"; fail "the ZeRO-3 profiled job"; }
sed 's/^\[[^]]*\] //' "$out/tools-z3.log" | sed -n '/DeepSpeed Flops Profiler/,/^------*$/p' >"$out/flops-profile-z3.txt"
[[ $(grep '^fwd MACs per GPU:' "$out/flops-profile-z3.txt") == $(grep '^fwd MACs per GPU:' "$out/flops-profile.txt") ]] ||
  fail "ZeRO-3 counts other MACs than ZeRO-2"
echo "== flops profile at ZeRO-3"; grep -E '^(fwd|bwd|iter|step|samples|params per GPU)' "$out/flops-profile-z3.txt"

# Note [Live job status]: a job long enough to be asked.
export DSLAUNCH_RUN_DIR="$out/run"
"$bin/dslaunch" "${common[@]}" --override "checkpoint.dir=$ck/status" --override train.steps=400 \
  --override checkpoint.interval=5 --override ds_config.steps_per_print=5 --job_id gpu-status \
  --metrics_addr 127.0.0.1:0 --agent_metrics_addr 127.0.0.1:0 --log_dir "$ck/logs" configs/gpt-124m.cfg \
  >"$out/status-job.log" 2>&1 &
job=$!
deadline=$((SECONDS + 400))
until "$bin/dslaunch" status --job gpu-status >"$out/status.txt" 2>&1 &&
  grep -qE 'progress: step ([6-9]|[1-9][0-9]+)/400' "$out/status.txt" && grep -q 'last checkpoint' "$out/status.txt"; do
  ((SECONDS < deadline)) || { kill -INT $job; wait $job || true; tail -n 20 "$out/status-job.log"; fail "no status"; }
  kill -0 $job 2>/dev/null || { tail -n 20 "$out/status-job.log"; fail "the status job ended early"; }
  sleep 1
done
url=$(grep -o 'serving the job.s metrics at http://[0-9.:]*/metrics' "$out/status-job.log" | awk '{print $NF}')
python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$url" \
  >"$out/metrics.txt"
agent_url=$(grep -ho "serving this host's rank metrics at http://[0-9.:]*/metrics" "$ck"/logs/gpu-status/agent_*.log | awk '{print $NF}')
python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" \
  "$agent_url" >"$out/agent-metrics.txt"
kill -INT $job
wait $job || true
echo "== dslaunch status"; cat "$out/status.txt"
echo "== /metrics (job and rank 0)"; grep -E '^dslaunch_(job|rank)_[a-z_]+\{' "$out/metrics.txt" | grep -v 'state=' | head -n 20
grep -q 'GiB' "$out/status.txt" || fail "the status table shows no GPU memory"
grep -q '^dslaunch_rank_gpu_memory_bytes' "$out/metrics.txt" || fail "no GPU memory in /metrics"
echo "== the agent's /metrics"; grep -E '^dsagent_' "$out/agent-metrics.txt" | head -n 12
grep -q '^dsagent_rank_gpu_memory_bytes' "$out/agent-metrics.txt" || fail "no GPU memory in the agent's /metrics"
echo "gpu-tools-check: every check passed"
