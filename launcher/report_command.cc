#include "launcher/report_command.h"

#include <linux/io_uring.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flag_table.h"
#include "common/version.h"
#include "launcher/launcher_notice.h"
#include "launcher/sibling_binary.h"
#include "launcher/subcommand_flags.h"

namespace dslaunch {
namespace {

// The first line of `path` that starts with `key`, after its ':'.
std::string ProcValue(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, key)) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "";
}

// io_uring as BlockIo would find it: a ring set up and closed again.
std::string IoUringAvailability() {
  io_uring_params params;
  std::memset(&params, 0, sizeof(params));
  const long fd = ::syscall(__NR_io_uring_setup, 4, &params);
  std::string disabled;
  std::ifstream knob("/proc/sys/kernel/io_uring_disabled");
  if (knob >> disabled) disabled = absl::StrCat(" (kernel.io_uring_disabled=", disabled, ")");
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return absl::StrCat("available", disabled);
  }
  return absl::StrCat("not available: ", std::strerror(errno), disabled,
                      "; NVMe offload falls back to pread/pwrite and says so");
}

// Runs `command` through the shell; its stdout, and whether it exited 0.
std::pair<std::string, bool> Capture(const std::string& command) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {"", false};
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {out, status == 0};
}

std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string Indented(const std::string& text) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(absl::StripSuffix(text, "\n"), '\n')) {
    lines.push_back(absl::StrCat("  ", line));
  }
  return absl::StrJoin(lines, "\n") + "\n";
}

}  // namespace

std::string HostReport() {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("version: ", VersionLine("dslaunch")));
  lines.push_back(absl::StrCat("gRPC: ", grpc::Version(), "; protobuf: ",
                               google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION)));
  utsname name{};
  if (::uname(&name) == 0) {
    lines.push_back(absl::StrCat("host: ", name.nodename, ", ", name.sysname, " ", name.release, " ", name.machine));
  }
  std::ifstream release("/etc/os-release");
  for (std::string text; std::getline(release, text);) {
    absl::string_view line = text;
    if (absl::ConsumePrefix(&line, "PRETTY_NAME=")) {
      lines.push_back(absl::StrCat("os: ", absl::StripSuffix(absl::StripPrefix(line, "\""), "\"")));
    }
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int usable = ::sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : -1;
  lines.push_back(absl::StrCat("CPU: ", ProcValue("/proc/cpuinfo", "model name"), "; ", usable,
                               " cores in this process's affinity mask of ", ::sysconf(_SC_NPROCESSORS_ONLN),
                               " online"));
  int numa = 0;
  while (std::ifstream(absl::StrCat("/sys/devices/system/node/node", numa, "/cpulist")).good()) ++numa;
  lines.push_back(absl::StrFormat("memory: %.1f GiB; NUMA nodes: %d",
                                  static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) /
                                      1073741824.0,
                                  numa));
  lines.push_back(absl::StrCat("io_uring: ", IoUringAvailability()));
  return absl::StrJoin(lines, "\n") + "\n";
}

// `--check`: dscomm_bench over the hosts the dslaunch options after "--"
// select, through dslaunch itself, so that what is checked is the path a job
// takes (agents, store, NCCL or Gloo). Returns the bench's exit status.
int RunCollectiveCheck(const std::vector<std::string>& launch_options, int64_t max_bytes) {
  for (const std::string& option : launch_options) {
    if (!absl::StartsWith(option, "-") && option.find('/') != std::string::npos) {
      Notice(absl::StrCat("report --check: '", option, "' looks like a program; after -- give only dslaunch's "
                          "host options (-H, --num_nodes, --num_gpus, -i, -e, --launcher, --agents, --token_file)"));
      return kUsageError;
    }
  }
  std::vector<std::string> command = {BinaryBesideThisOne("dslaunch")};
  command.insert(command.end(), launch_options.begin(), launch_options.end());
  const std::vector<std::string> bench = {BinaryBesideThisOne("dscomm_bench"), "--min_bytes", "1048576",
                                          "--max_bytes", absl::StrCat(max_bytes), "--iters", "5", "--warmup", "2"};
  command.insert(command.end(), bench.begin(), bench.end());
  std::vector<std::string> quoted;
  for (const std::string& part : command) quoted.push_back(ShellQuote(part));
  const std::string line = absl::StrJoin(quoted, " ");
  std::printf("== collectives over the job's hosts (%s)\n", absl::StrJoin(command, " ").c_str());
  std::fflush(stdout);
  const int status = std::system(line.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  std::printf(code == 0 ? "check: every collective returned the right values; busbw above is per size, as "
                          "nccl-tests defines it\n"
                        : "check: FAILED (exit %d): see the lines above\n",
              code);
  return code;
}

int RunReportCommand(const std::vector<std::string>& args) {
  bool check = false;
  int64_t check_max_bytes = 64 << 20;
  FlagTable flags("dslaunch report", "dslaunch report [--check [--check_max_bytes N] [-- DSLAUNCH HOST OPTIONS]]");
  flags.Bool("--check", &check,
             "also run all_reduce, reduce_scatter and all_gather over the hosts the options after -- select "
             "(dscomm_bench through dslaunch) and print their bus bandwidth")
      .Int("--check_max_bytes", &check_max_bytes, "N", "the largest buffer --check sends (from 1 MiB, doubling)",
           {1 << 20, int64_t{1} << 34});
  if (EarlyExit early = ParseSubcommandFlags(flags, args, "report", "", /*allow_positionals=*/true)) return *early;
  if (!check && !flags.positionals().empty()) {
    Notice(absl::StrCat("report: unexpected argument '", flags.positionals().front(),
                        "' (host options go after --check --)"));
    return kUsageError;
  }
  std::fputs("== this host\n", stdout);
  std::fputs(HostReport().c_str(), stdout);
  std::fputs("== GPUs (the driver's view: nvidia-smi)\n", stdout);
  auto [gpus, gpus_ok] = Capture(
      "nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv,noheader 2>/dev/null");
  if (gpus_ok && !gpus.empty()) {
    std::fputs(Indented(gpus).c_str(), stdout);
    auto [topology, topology_ok] = Capture("nvidia-smi topo -m 2>/dev/null");
    if (topology_ok && !topology.empty()) {
      std::fputs("  topology (nvidia-smi topo -m):\n", stdout);
      std::fputs(Indented(Indented(topology)).c_str(), stdout);
    }
  } else {
    std::fputs("  none: nvidia-smi is not here or sees no GPU\n", stdout);
  }
  const std::string dsrank = BinaryBesideThisOne("dsrank");
  std::fputs(absl::StrCat("== the runtime (", dsrank, " --report)\n").c_str(), stdout);
  std::fflush(stdout);
  auto [runtime, runtime_ok] = Capture(absl::StrCat(ShellQuote(dsrank), " --report"));
  std::fputs(Indented(runtime).c_str(), stdout);
  if (!runtime_ok) {
    Notice(absl::StrCat("report: ", dsrank, " --report failed: the runtime's half above is missing or partial"));
    return 1;
  }
  if (check) return RunCollectiveCheck(flags.positionals(), check_max_bytes);
  return 0;
}

}  // namespace dslaunch
