#!/usr/bin/env bash
# Note [Agent simulator]: the scale benchmark's whole path at a small size,
# so that it keeps working: a real dslaunch against 24 simulated agents x 8
# ranks; every rank gets past the NCCL-id exchange of its world, tensor and
# data groups on the real store, heartbeats reach the controller, one rank
# crashes and dslaunch stops the other 191, names the crashed rank and exits
# non-zero (scripts/control-plane-scale.sh checks each of these and fails
# otherwise). No timing is checked here: the figures are the benchmark's.
source "$(dirname "$0")/lib.sh"

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
AGENTS=24 RANKS_PER_AGENT=8 HOLD_MS=1200 HEARTBEAT_MS=300 KEEP_DIR="$WORK/keep" \
  DSLAUNCH="$DSLAUNCH" DSAGENT_SIM="$DSAGENT_SIM" bash "$REPO/scripts/control-plane-scale.sh" \
  > "$WORK/table.md" 2> "$WORK/scale.err" || { cat "$WORK/scale.err"; fail "the scale benchmark failed at 24 agents"; }
cat "$WORK/table.md"
grep -q "^| 24 | 192 | " "$WORK/table.md" || fail "the benchmark printed no row for 24 agents x 8 ranks"
report="$WORK/keep/24/report"
value() { sed -n "s/^$1=//p" "$report"; }
[[ "$(value ranks_past_rendezvous)" == 192 ]] || fail "not every rank got past rendezvous: $(value ranks_past_rendezvous)"
[[ "$(value ranks_ended)" == 192 ]] || fail "not every rank ended: $(value ranks_ended)"
(( $(value heartbeat_events) >= 192 )) || fail "no round of heartbeats reached the controller: $(value heartbeat_events) events"
# Every agent got a StopJob: the crash stopped the job everywhere.
(( $(value stop_calls) >= 24 )) || fail "only $(value stop_calls) of 24 agents were told to stop"
grep -q "fail-fast: 191 other rank(s) stopped" "$WORK/keep/24/dslaunch.log" ||
  fail "dslaunch did not stop the other 191 ranks: $(tail -5 "$WORK/keep/24/dslaunch.log")"
pass "24 simulated agents x 8 ranks: launched, past rendezvous, heartbeats, fail-fast, teardown"
