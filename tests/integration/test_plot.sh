#!/usr/bin/env bash
# Note [Plots]: `dslaunch plot` on the csv_monitor files of a real dsrank run
# (two Gloo ranks): a PNG (checked as a PNG of the stated size, kept as a
# test artifact in $PLOT_ARTIFACT_DIR when set) and an HTML page that shows
# it and each metric's first and last values, which match the CSV files;
# the same from the run's TensorBoard event files.
# A folder without csv_monitor files, or a path that is no folder, is an
# error that says what to do.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
command -v gnuplot >/dev/null || fail "gnuplot is missing (scripts/setup.sh installs gnuplot-nox)"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg

"$DSLAUNCH" --num_gpus 2 --override "data.prepared=$WORK/data/fortunes" --override train.steps=12 \
  --override train.warmup_steps=2 --override train.eval_interval=4 --override train.eval_steps=2 \
  --override checkpoint.interval=0 --override "checkpoint.dir=$WORK/ck" --override ds_config.steps_per_print=4 \
  --override ds_config.csv_monitor.enabled=true --override "ds_config.csv_monitor.output_path=$WORK/runs" \
  --override ds_config.csv_monitor.job_name=tiny --override ds_config.tensorboard.enabled=true \
  --override "ds_config.tensorboard.output_path=$WORK/tb" --override ds_config.tensorboard.job_name=tiny \
  "$CONFIG" --quiet_config >"$WORK/job.out" 2>"$WORK/job.err" ||
  fail "the monitored job exited $?: $(tail -3 "$WORK/job.err")"

"$DSLAUNCH" plot "$WORK/runs" --output "$WORK/plot" >"$WORK/plot.out" 2>"$WORK/plot.err" ||
  fail "dslaunch plot exited $?: $(cat "$WORK/plot.err")"
grep -qE "^dslaunch plot: 4 panel\(s\) of [0-9]+ metric file\(s\): .*/plot.png, .*/plot.html$" "$WORK/plot.out" ||
  fail "dslaunch plot said: $(cat "$WORK/plot.out" "$WORK/plot.err")"
check_plot() {  # FOLDER: its PNG and page, against the CSV files of the run
/usr/bin/python3 - "$1" "$WORK/runs/tiny" <<'PY'
import csv, os, struct, sys, html.parser
folder, run = sys.argv[1:]
with open(os.path.join(folder, "plot.png"), "rb") as f:
    head = f.read(24)
assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", head[16:24])
assert (width, height) == (1200, 900), (width, height)  # 2 x 2 panels of 600 x 450
page = open(os.path.join(folder, "plot.html")).read()
assert '<img src="plot.png"' in page
class Cells(html.parser.HTMLParser):
    rows, row, cell = [], None, None
    def handle_starttag(self, tag, attrs):
        if tag == "tr": self.row = []
        if tag == "td": self.cell = ""
    def handle_data(self, data):
        if self.cell is not None: self.cell += data
    def handle_endtag(self, tag):
        if tag == "td": self.row.append(self.cell); self.cell = None
        if tag == "tr" and self.row: self.rows.append(self.row)
parser = Cells(); parser.feed(page)
table = {row[0]: row for row in parser.rows}
for name in ("Train_Samples_train_loss", "Eval_Samples_eval_loss", "Train_Samples_lr", "Train_Samples_tokens_per_second"):
    values = [float(r[1]) for r in list(csv.reader(open(os.path.join(run, name + ".csv"))))[1:]]
    row = table[name]
    assert int(row[1]) == len(values), (name, row, len(values))
    # The page prints 6 digits (TensorBoard keeps float32, closer than that).
    assert abs(float(row[2]) - values[0]) <= 1e-5 * abs(values[0]) and abs(float(row[3]) - values[-1]) <= 1e-5 * abs(values[-1]), (name, row, values)
print("plot.png %dx%d; page rows: %d" % (width, height, len(parser.rows)))
PY
}
check_plot "$WORK/plot" || fail "the plot or its page is wrong"
if [[ -n ${PLOT_ARTIFACT_DIR:-} ]]; then mkdir -p "$PLOT_ARTIFACT_DIR" && cp "$WORK/plot/plot.png" "$WORK/plot/plot.html" "$PLOT_ARTIFACT_DIR/"; fi
pass "dslaunch plot draws loss, learning rate, throughput and memory of a real run; its page's figures match the CSV files"

# The same run's TensorBoard files, when a run has no CSV files.
"$DSLAUNCH" plot "$WORK/tb" --output "$WORK/plot-tb" >"$WORK/plot-tb.out" 2>"$WORK/plot-tb.err" ||
  fail "dslaunch plot of the TensorBoard files exited $?: $(cat "$WORK/plot-tb.err")"
grep -qE "^dslaunch plot: 4 panel\(s\) of [0-9]+ metric file\(s\)" "$WORK/plot-tb.out" ||
  fail "dslaunch plot of the TensorBoard files said: $(cat "$WORK/plot-tb.out" "$WORK/plot-tb.err")"
check_plot "$WORK/plot-tb" || fail "the plot of the TensorBoard files disagrees with the CSV files"
pass "dslaunch plot draws the same curves from the run's TensorBoard event files"

mkdir "$WORK/empty"
set +e
"$DSLAUNCH" plot "$WORK/empty" >"$WORK/empty.out" 2>&1
empty=$?
"$DSLAUNCH" plot "$WORK/nowhere" >"$WORK/nowhere.out" 2>&1
nowhere=$?
set -e
((empty == 1)) && grep -q "no csv_monitor or TensorBoard file under .* (set ds_config.csv_monitor.enabled or tensorboard.enabled: true" "$WORK/empty.out" ||
  fail "a folder without CSV files: exit $empty, $(cat "$WORK/empty.out")"
((nowhere == 2)) && grep -q "is not a folder" "$WORK/nowhere.out" || fail "a missing folder: exit $nowhere, $(cat "$WORK/nowhere.out")"
pass "a folder without csv_monitor files and a missing folder are errors that say what to do"
