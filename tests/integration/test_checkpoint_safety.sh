#!/usr/bin/env bash
# Checkpoints are never silently corrupt, never silently skipped, never
# deleted while they are the only good ones; a diverged run stops instead of
# checkpointing NaN (issue 13, findings 2-5):
#   1. a flipped byte or a deleted rank file in the newest checkpoint: named,
#      skipped, the run resumes from the previous one (was: NaN losses from a
#      flipped file, a deleted one accepted silently);
#   2. every unreadable `latest` (missing tag, garbage, empty, deleted,
#      COMPLETE deleted, the folder replaced by a file, a path outside
#      checkpoint.dir): named, and the newest checkpoint that verifies is
#      used (was: a silent restart at step 1 whose rotation deleted them);
#   3. dsconsolidate --verify names what is wrong; export refuses a corrupt
#      checkpoint;
#   4. disk full at the commit and in the middle of the save, on a small
#      tmpfs: the errno and path are named, `latest` and the previous
#      checkpoint stay intact, no partial folder is left (was: rc 0 with a
#      0-byte `latest`, or an abort with "unexpected pos");
#   5. a diverging run (fp32 and bf16) skips its non-finite steps and stops
#      after train.max_nonfinite_steps of them, with a root cause naming the
#      steps (was: rc 0 with NaN losses and NaN checkpoints).
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
: "${DSCONSOLIDATE:?DSCONSOLIDATE must point at the dsconsolidate binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--num_gpus 2 --override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0
  --override train.warmup_steps=4 --override train.global_batch_size=16 --override train.micro_batch_size=8
  --override checkpoint.interval=5 --override checkpoint.keep=2 --override ds_config.zero_optimization.stage=1)

train() {  # NAME CHECKPOINT_DIR STEPS [more dslaunch overrides...]: sets RC
  local name=$1 dir=$2 steps=$3
  shift 3
  RC=0
  "$DSLAUNCH" "${COMMON[@]}" --override "checkpoint.dir=$dir" --override "train.steps=$steps" "$@" "$CONFIG" \
    --loss_log "$WORK/$name.tsv" >"$WORK/$name.out" 2>"$WORK/$name.err" || RC=$?
}
says() { grep -qF -- "$2" "$WORK/$1.out" "$WORK/$1.err"; }
finite_losses() { [[ -s $WORK/$1.tsv ]] && ! grep -qiE 'nan|inf' "$WORK/$1.tsv"; }

train base "$WORK/base" 20
((RC == 0)) || fail "base run exited $RC"
[[ -d $WORK/base/global_step15 && -d $WORK/base/global_step20 ]] || fail "base run: expected global_step15 and 20"
"$DSCONSOLIDATE" --verify "$WORK/base" >"$WORK/verify_base.out" || fail "the base checkpoints do not verify"
grep -q "^ok .*global_step20: step 20, 2 rank(s)" "$WORK/verify_base.out" || fail "verify: $(cat "$WORK/verify_base.out")"

# resume_case NAME EXPECTED_TAG EXPECTED_NOTE SPOIL (run in a copy of base)
resume_case() {
  local name=$1 expected=$2 note=$3 spoil=$4 dir=$WORK/case_$1
  cp -a "$WORK/base" "$dir"
  (cd "$dir" && eval "$spoil") || fail "$name: could not spoil the copy: $spoil"
  train "$name" "$dir" 21
  ((RC == 0)) || fail "$name: exited $RC"
  says "$name" "resumed from $dir/$expected at step ${expected#global_step}" ||
    fail "$name: did not resume from $expected"
  says "$name" "$note" || fail "$name: no '$note' in its output"
  ! says "$name" "training from step 1" || fail "$name: started from step 1"
  finite_losses "$name" || fail "$name: losses are not finite"
  echo "$name: $(grep -hE 'skipped|no .latest|resumed from' "$WORK/$name.out" | head -n 2 | tr '\n' ' ')"
}
mkdir -p "$WORK/other"
cp -a "$WORK/base/global_step20" "$WORK/other/global_step30"
resume_case flipped global_step15 "rank_0.pt does not match its checksum" \
  'size=$(stat -c %s global_step20/rank_0.pt); printf "%016d" 0 | dd of=global_step20/rank_0.pt bs=1 seek=$((size / 2)) conv=notrunc status=none'
resume_case deleted_rank_file global_step15 "rank_1.pt is missing" 'rm global_step20/rank_1.pt'
resume_case latest_missing_tag global_step20 "which is not a folder" 'echo global_step99 >latest'
resume_case latest_garbage global_step20 "does not name a checkpoint" 'printf "\001\377junk\n" >latest'
resume_case latest_empty global_step20 "latest is empty" ': >latest'
resume_case latest_deleted global_step20 "no 'latest' in" 'rm latest'
resume_case complete_deleted global_step15 "no commit record" 'rm global_step20/COMPLETE'
resume_case tag_is_a_file global_step15 "not a folder" 'rm -r global_step20 && echo x >global_step20'
resume_case latest_outside global_step20 "does not name a checkpoint" 'echo ../other/global_step30 >latest'
pass "a corrupt or missing checkpoint file and every unreadable latest are named, skipped, and the newest good checkpoint is used"

# A restart's tag (the controller's committed one) that fails verification
# falls back the same way: dsrank --resume_tag is what the controller passes.
cp -a "$WORK/base" "$WORK/flip_only"
size=$(stat -c %s "$WORK/flip_only/global_step20/rank_1.pt")
printf "%016d" 0 | dd of="$WORK/flip_only/global_step20/rank_1.pt" bs=1 seek=$((size / 2)) conv=notrunc status=none
code=0
"$DSCONSOLIDATE" --verify "$WORK/flip_only" >"$WORK/verify_flip.out" || code=$?
((code == 1)) || fail "dsconsolidate --verify of a flipped checkpoint exited $code"
grep -q "^FAILED .*global_step20: rank_1.pt does not match its checksum" "$WORK/verify_flip.out" ||
  fail "verify: $(cat "$WORK/verify_flip.out")"
grep -q "^ok .*global_step15" "$WORK/verify_flip.out" || fail "verify: $(cat "$WORK/verify_flip.out")"
code=0
"$DSCONSOLIDATE" "$WORK/flip_only" --tag global_step20 --output "$WORK/flip.safetensors" 2>"$WORK/export_flip.err" || code=$?
((code == 1)) && grep -q "rank_1.pt does not match its checksum" "$WORK/export_flip.err" ||
  fail "export of a flipped checkpoint: rc $code, $(cat "$WORK/export_flip.err")"
[[ ! -e $WORK/flip.safetensors ]] || fail "export of a flipped checkpoint left a file"
pass "dsconsolidate --verify names the bad file; export refuses it"

# 4. Disk full. Calibration on a roomy tmpfs: the pages a 10-step run's
# checkpoint at step 5 takes (with `latest`), and the rank files of step 10.
# (Outside $WORK: the work folder is removed before EXTRA_CLEANUP runs.)
TMPFS=$(mktemp -d /tmp/dslaunch-tmpfs.XXXXXX)
unmount_tmpfs() { umount "$TMPFS" 2>/dev/null || true; }
EXTRA_CLEANUP+=(unmount_tmpfs "rmdir $TMPFS")
free_pages() { stat -f -c %a "$TMPFS"; }
fresh_tmpfs() { unmount_tmpfs; mount -t tmpfs -o size=64m tmpfs "$TMPFS"; }
fresh_tmpfs
before=$(free_pages)
train calibrate "$TMPFS/ck" 5
((RC == 0)) || fail "calibration exited $RC"
step5_pages=$((before - $(free_pages)))
rank_pages=0
for f in "$TMPFS"/ck/global_step5/rank_*.pt; do rank_pages=$((rank_pages + ($(stat -c %s "$f") + 4095) / 4096)); done
echo "calibration: checkpoint 5 with latest takes $step5_pages pages, its rank files $rank_pages"

# disk_full NAME SPARE_PAGES: room for checkpoint 5 and then SPARE_PAGES.
disk_full() {
  local name=$1 spare=$2
  fresh_tmpfs
  local filler=$(($(free_pages) - step5_pages - spare))
  dd if=/dev/zero of="$TMPFS/filler" bs=4096 count=$filler status=none
  train "$name" "$TMPFS/ck" 10
  ((RC != 0)) || fail "$name: a full disk exited 0"
  ((RC < 128)) || fail "$name: exited $RC (a signal): $(tail -n 5 "$WORK/$name.err")"
  says "$name" "No space left on device (ENOSPC)" || fail "$name: no ENOSPC named"
  [[ $(cat "$TMPFS/ck/latest") == global_step5 ]] || fail "$name: latest is '$(cat "$TMPFS/ck/latest")'"
  "$DSCONSOLIDATE" --verify "$TMPFS/ck" >"$WORK/$name.verify" || fail "$name: $(cat "$WORK/$name.verify")"
  [[ -z $(find "$TMPFS/ck" -maxdepth 1 -name '.*partial') ]] || fail "$name: a partial folder is left"
  [[ ! -e $TMPFS/ck/global_step10 ]] || fail "$name: global_step10 exists"
  echo "$name: $(grep -h 'ENOSPC' "$WORK/$name.out" "$WORK/$name.err" | head -n 1)"
}
# The rank files and their two digest records fit; the commit record does not.
disk_full full_at_commit $((rank_pages + 2))
says full_at_commit "COMPLETE" || fail "full_at_commit: the commit record is not named"
# The rank files do not fit.
disk_full full_mid_save $((rank_pages - 1))
unmount_tmpfs
pass "a full disk at the commit and mid-save names ENOSPC and the path, and leaves latest and the previous checkpoint intact"

# 5. Divergence: an absurd learning rate makes the loss overflow after the
# first step; every later step is skipped and the third in a row stops it.
for precision in fp32 bf16; do
  train "diverge_$precision" "$WORK/ck_diverge_$precision" 20 --override train.lr=1e30 \
    --override "train.precision=$precision"
  ((RC == 1)) || fail "diverging $precision run exited $RC"
  says "diverge_$precision" "its loss or gradient norm is not finite (1 in a row" || fail "$precision: no skipped step"
  says "diverge_$precision" "training diverged: the loss or gradient norm was not finite in 3 steps in a row" ||
    fail "$precision: no divergence root cause"
  grep -q "root cause" "$WORK/diverge_$precision.err" || fail "$precision: dslaunch named no root cause"
  # A checkpoint at a skipped step holds the last finite parameters.
  for ck in "$WORK/ck_diverge_$precision"/global_step*; do
    [[ -d $ck ]] || continue
    "$DSCONSOLIDATE" "$WORK/ck_diverge_$precision" --tag "${ck##*/}" --output "$WORK/diverge.safetensors" \
      >/dev/null 2>"$WORK/diverge_export.err" || fail "$precision: ${ck##*/}: $(cat "$WORK/diverge_export.err")"
  done
  echo "$precision: $(grep -h 'root cause' "$WORK/diverge_$precision.err" | head -n 1 | cut -c 1-220)"
done
pass "a diverging run skips non-finite steps and stops after train.max_nonfinite_steps of them"
