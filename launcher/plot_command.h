// `dslaunch plot RUN_DIR`: a run's curves without a server.
//
// Note [Plots]
// Reads the csv_monitor files of a run (one "step,value" file per metric,
// DeepSpeed's layout: <output_path>/<job_name>/<Metric_path>.csv; RUN_DIR is
// either folder, or any folder above them holding one run), or, when there
// are none, its TensorBoard event files (one folder of them; resumed
// attempts' steps replace the earlier ones, as TensorBoard shows them), and
// draws, with
// gnuplot (Debian's gnuplot-nox, run as a child process), one PNG of up to
// four panels: the loss (training, and evaluation when logged), the learning
// rate, the throughput (tokens/s, or samples/s) and the memory (peak GPU
// allocation, peak host RSS). The x axis is samples, as DeepSpeed's
// monitors log it. Beside the PNG, an HTML page shows it with each metric's
// first, last, lowest and highest value and its file. A panel whose metric
// was not logged is left out and the page says so; no CSV or event file at
// all, event files of several runs, a corrupt record, or no gnuplot, is an
// error that says what to do.
//
//   dslaunch plot runs/csv [--output DIR]   →  DIR/plot.png, DIR/plot.html
#pragma once

#include <string>
#include <vector>

namespace dslaunch {

// `args` without "dslaunch plot"; returns the exit code.
int RunPlotCommand(const std::vector<std::string>& args);

}  // namespace dslaunch
