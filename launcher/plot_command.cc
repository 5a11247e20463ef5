#include "launcher/plot_command.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flag_table.h"
#include "launcher/launcher_notice.h"
#include "launcher/subcommand_flags.h"
#include "runtime/monitor/csv_monitor.h"
#include "runtime/monitor/tensorboard_event_reader.h"
#include "runtime/monitor/training_monitors.h"

namespace dslaunch {
namespace {

namespace metric = runtime::monitor_metric;
namespace fs = std::filesystem;

// One metric's points, read from its csv_monitor file.
struct Series {
  std::string metric;
  std::string path;
  std::vector<std::pair<double, double>> points;  // (samples, value)
};

// The series of every csv_monitor file under `folder`, by file name. A file
// that is not "step,<name>" rows of numbers is skipped (said in `skipped`).
std::map<std::string, Series> ReadCsvFiles(const std::string& folder, std::vector<std::string>* skipped) {
  std::map<std::string, Series> found;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(folder, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (!it->is_regular_file() || it->path().extension() != ".csv") continue;
    std::ifstream in(it->path());
    std::string line;
    if (!std::getline(in, line) || line.rfind("step,", 0) != 0) {
      skipped->push_back(it->path().string());
      continue;
    }
    Series series;
    series.path = it->path().string();
    bool good = true;
    while (std::getline(in, line)) {
      std::vector<std::string> cells = absl::StrSplit(line, ',');
      double step = 0, value = 0;
      if (cells.size() != 2 || !absl::SimpleAtod(cells[0], &step) || !absl::SimpleAtod(cells[1], &value)) {
        good = false;
        break;
      }
      series.points.emplace_back(step, value);
    }
    if (!good || series.points.empty()) {
      skipped->push_back(series.path);
      continue;
    }
    const std::string name = it->path().filename().string();
    if (found.count(name)) {
      skipped->push_back(absl::StrCat(series.path, " (a second file of the same metric: give the folder of one run)"));
      continue;
    }
    found[name] = std::move(series);
  }
  return found;
}

// Note [Plots]: without csv_monitor files, the run's TensorBoard event files
// (one folder of events.out.tfevents.* files, read in name order with
// resumes purged, runtime/monitor/tensorboard_event_reader.h), keyed like
// the CSV files.
std::map<std::string, Series> ReadEventFiles(const std::string& folder, std::string* problem) {
  std::map<std::string, std::vector<std::string>> by_folder;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(folder, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (it->is_regular_file() && it->path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      by_folder[it->path().parent_path().string()].push_back(it->path().string());
    }
  }
  if (by_folder.empty()) return {};
  if (by_folder.size() > 1) {
    *problem = absl::StrCat("TensorBoard event files of ", by_folder.size(), " runs under ", folder,
                            " (", by_folder.begin()->first, ", ...): give the folder of one");
    return {};
  }
  auto& [run, files] = *by_folder.begin();
  std::sort(files.begin(), files.end());
  auto scalars = runtime::ReadTensorBoardScalars(files);
  if (!scalars.ok()) {
    *problem = std::string(scalars.status().message());
    return {};
  }
  if (scalars->torn_records > 0) {
    Notice(absl::StrCat("plot: ", scalars->torn_records, " event file(s) under ", run,
                        " end in a record cut short (a killed writer); plotted what came before"));
  }
  std::map<std::string, Series> found;
  for (const auto& [tag, points] : scalars->by_tag) {
    if (points.empty()) continue;
    Series series{tag, absl::StrCat(run, " (TensorBoard ", tag, ")"), {}};
    for (const runtime::ScalarPoint& point : points) series.points.emplace_back(point.step, point.value);
    found[runtime::CsvMonitorFileName(tag)] = std::move(series);
  }
  return found;
}

struct Panel {
  std::string title;
  std::string y_label;
  std::vector<std::pair<std::string, std::string>> metrics;  // (metric, legend)
  bool log_scale = false;
};

std::vector<Panel> Panels() {
  return {
      {"loss", "loss", {{metric::kTrainLoss, "train"}, {metric::kEvalLoss, "eval"}}},
      {"learning rate", "lr", {{metric::kLearningRate, "lr"}}},
      {"throughput", "per second", {{metric::kTokensPerSecond, "tokens/s"}, {metric::kSamplesPerSecond, "samples/s"}},
       /*log_scale=*/true},
      {"memory", "GiB", {{metric::kPeakGpuGib, "peak GPU allocated"}, {metric::kHostPeakRssGib, "peak host RSS"}}},
  };
}

// gnuplot's single-quoted string: a quote doubles.
std::string GnuplotQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

int RunPlotCommand(const std::vector<std::string>& args) {
  std::string output;
  FlagTable flags("dslaunch plot", "dslaunch plot RUN_DIR [--output DIR]");
  flags.Positional("RUN_DIR", "a run's csv_monitor or tensorboard folder (output_path, or its job_name folder)")
      .String("--output", &output, "DIR", "where plot.png and plot.html go (default: RUN_DIR)");
  if (EarlyExit early = ParseSubcommandFlags(flags, args, "plot", "", /*allow_positionals=*/true)) return *early;
  if (flags.positionals().size() != 1) {
    Notice("plot: give one RUN_DIR (dslaunch plot --help)");
    return kUsageError;
  }
  const std::string run_dir = flags.positionals()[0];
  if (!fs::is_directory(run_dir)) {
    Notice(absl::StrCat("plot: ", run_dir, " is not a folder"));
    return kUsageError;
  }
  if (output.empty()) output = run_dir;
  std::vector<std::string> skipped;
  std::map<std::string, Series> files = ReadCsvFiles(run_dir, &skipped);
  for (const std::string& path : skipped) Notice(absl::StrCat("plot: skipping ", path, ": not a csv_monitor file"));
  if (files.empty()) {
    std::string problem;
    files = ReadEventFiles(run_dir, &problem);
    if (!problem.empty()) {
      Notice(absl::StrCat("plot: ", problem));
      return 1;
    }
  }
  if (files.empty()) {
    Notice(absl::StrCat("plot: no csv_monitor or TensorBoard file under ", run_dir,
                        " (set ds_config.csv_monitor.enabled or tensorboard.enabled: true and its output_path; "
                        "dslaunch plot reads those files)"));
    return 1;
  }
  std::error_code error;
  fs::create_directories(output, error);
  if (error) {
    Notice(absl::StrCat("plot: cannot create ", output, ": ", error.message()));
    return 1;
  }

  // The panels that have data, each series written as a data block of the script.
  std::vector<Panel> panels;
  std::vector<std::string> missing;
  std::string data_blocks, plots;
  int block = 0;
  for (const Panel& panel : Panels()) {
    std::vector<std::string> lines;
    for (const auto& [name, legend] : panel.metrics) {
      auto it = files.find(runtime::CsvMonitorFileName(name));
      if (it == files.end()) {
        missing.push_back(name);
        continue;
      }
      absl::StrAppend(&data_blocks, "$d", block, " << EOD\n");
      for (const auto& [x, y] : it->second.points) absl::StrAppendFormat(&data_blocks, "%.17g %.17g\n", x, y);
      absl::StrAppend(&data_blocks, "EOD\n");
      lines.push_back(absl::StrCat("$d", block, " using 1:2 with lines linewidth 2 title ", GnuplotQuote(legend)));
      ++block;
    }
    if (lines.empty()) continue;
    absl::StrAppend(&plots, "set title ", GnuplotQuote(panel.title), "\nset ylabel ", GnuplotQuote(panel.y_label),
                    "\n", panel.log_scale ? "set logscale y\n" : "unset logscale y\n", "plot ",
                    absl::StrJoin(lines, ", "), "\n");
    panels.push_back(panel);
  }
  if (panels.empty()) {
    Notice(absl::StrCat("plot: none of the metrics dslaunch plots (loss, learning rate, throughput, memory) is under ",
                        run_dir));
    return 1;
  }
  const std::string png = (fs::path(output) / "plot.png").string();
  const int columns = panels.size() > 1 ? 2 : 1;
  const int rows = (static_cast<int>(panels.size()) + columns - 1) / columns;
  const std::string script = absl::StrCat(
      data_blocks, "set terminal pngcairo size ", 600 * columns, ",", 450 * rows, " font 'sans,10'\n",
      "set output ", GnuplotQuote(png), "\nset grid\nset key top right\nset xlabel 'samples'\n",
      "set format y '%g'\nset multiplot layout ", rows, ",", columns, " title ",
      GnuplotQuote(absl::StrCat("dslaunch plot: ", run_dir)), "\n", plots, "unset multiplot\n");
  std::FILE* gnuplot = ::popen("gnuplot 2>&1", "w");
  if (gnuplot == nullptr) {
    Notice("plot: cannot start gnuplot (apt-get install gnuplot-nox)");
    return 1;
  }
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = ::pclose(gnuplot);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Notice(WIFEXITED(status) && WEXITSTATUS(status) == 127
               ? "plot: gnuplot is not installed (apt-get install gnuplot-nox; scripts/setup.sh does)"
               : absl::StrCat("plot: gnuplot failed (exit status ", status, "); its messages are above"));
    return 1;
  }

  // The page: the picture, then each metric's figures and file.
  std::string rows_html;
  for (const auto& [name, series] : files) {
    double low = series.points[0].second, high = low;
    for (const auto& point : series.points) {
      low = std::min(low, point.second);
      high = std::max(high, point.second);
    }
    absl::StrAppendFormat(&rows_html,
                          "<tr><td>%s</td><td>%d</td><td>%.6g</td><td>%.6g</td><td>%.6g</td><td>%.6g</td>"
                          "<td><code>%s</code></td></tr>\n",
                          HtmlEscape(name.substr(0, name.size() - 4)), series.points.size(),
                          series.points.front().second, series.points.back().second, low, high,
                          HtmlEscape(series.path));
  }
  std::string missing_html;
  if (!missing.empty()) {
    missing_html = absl::StrCat("<p>Not logged by this run: ", HtmlEscape(absl::StrJoin(missing, ", ")), ".</p>\n");
  }
  const std::string html_path = (fs::path(output) / "plot.html").string();
  std::ofstream html(html_path);
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dslaunch plot: " << HtmlEscape(run_dir)
       << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,td:last-child{text-align:left}"
          "</style></head><body>\n<h1>"
       << HtmlEscape(run_dir) << "</h1>\n<img src=\"plot.png\" alt=\"the run's curves\">\n" << missing_html
       << "<table>\n<tr><th>metric</th><th>points</th><th>first</th><th>last</th><th>lowest</th><th>highest</th>"
          "<th>file</th></tr>\n"
       << rows_html << "</table>\n</body></html>\n";
  html.close();
  if (!html) {
    Notice(absl::StrCat("plot: cannot write ", html_path));
    return 1;
  }
  std::printf("dslaunch plot: %zu panel(s) of %zu metric file(s): %s, %s\n", panels.size(), files.size(),
              png.c_str(), html_path.c_str());
  return 0;
}

}  // namespace dslaunch
