#include "launcher/launcher_options.h"

#include "common/core_list.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/control_plane_defaults.h"
#include "common/control_plane_limits.h"
#include "common/nearest_name.h"
#include "common/net_address.h"
#include "launcher/launch_limits.h"

namespace dslaunch {
namespace {

constexpr absl::string_view kUsageLine =
    "usage: dslaunch [options] PROGRAM [ARGS...] | dslaunch [options] JOB.cfg | dslaunch --validate FILE";

// kFlag options take no value: "--dry_run=true" is an error, as with
// DeepSpeed's argparse store_true flags, so that "--dry_run=false" can never
// silently mean true.
enum class ValueKind { kFlag, kInteger, kText };

using Setter = absl::Status (*)(absl::string_view flag, const std::string& value,
                                LauncherOptions& options);

// One row of the controller's config registry (STYLE.md 7). The same rows drive
// parsing and --help, so an option cannot exist without its doc and default.
struct OptionRow {
  absl::string_view name;          // "--num_gpus"
  absl::string_view alias;         // "-i", or empty
  ValueKind kind;
  absl::string_view metavar;       // what --help calls the value: "N", "PATH"
  absl::string_view default_text;  // shown as "(default: ...)"; empty shows none
  absl::string_view doc;           // one line
  Setter set;
  // A numeric default from common/control_plane_defaults.h, shown by --help
  // when default_text is empty (the number is written once, there).
  int64_t default_number = -1;
};

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': ", why));
}

// An integer in [min, max]. Only an optional '-' and digits are accepted:
// SimpleAtoi alone would also take "+3" and " 3".
absl::StatusOr<int64_t> ParseInteger(absl::string_view flag, absl::string_view text, int64_t min,
                                     int64_t max) {
  absl::string_view digits = text.substr(!text.empty() && text[0] == '-' ? 1 : 0);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return BadValue(flag, text, "not an integer");
  }
  int64_t value = 0;
  const bool fits = absl::SimpleAtoi(text, &value);  // false only on int64 overflow here
  if ((fits ? value : (text[0] == '-' ? -1 : 1)) < 0 && min >= 0) {
    return BadValue(flag, text, "must not be negative");
  }
  const bool bounded = max != INT64_MAX && max != INT_MAX;
  if (!fits || value < min || value > max) {
    if (bounded) return BadValue(flag, text, absl::StrCat("must be in ", min, "..", max));
    if (fits && value < min) return BadValue(flag, text, absl::StrCat("must be at least ", min));
    return BadValue(flag, text, absl::StrCat("too large (at most ", max, ")"));
  }
  return value;
}

absl::Status SetInt(absl::string_view flag, absl::string_view text, int min, int max, int* out) {
  auto value = ParseInteger(flag, text, min, max);
  if (!value.ok()) return value.status();
  *out = static_cast<int>(*value);
  return absl::OkStatus();
}

absl::Status SetInt64(absl::string_view flag, absl::string_view text, int64_t min, int64_t* out) {
  auto value = ParseInteger(flag, text, min, INT64_MAX);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

// Restart waits: at most a day, which also keeps the doubling far from overflow.
constexpr int64_t kMaxBackoffMs = 24 * 3600 * 1000;

absl::Status SetBackoff(absl::string_view flag, absl::string_view text, int64_t* out) {
  auto value = ParseInteger(flag, text, 0, kMaxBackoffMs);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

// Ranks in --console_ranks are kept in a std::set, one node per rank, so a
// typo such as 0-99999999 must not allocate gigabytes.
constexpr int kMaxConsoleRank = (1 << 20) - 1;

absl::Status SetConsoleRanks(absl::string_view flag, const std::string& value,
                             LauncherOptions& options) {
  std::set<int> ranks;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(item, absl::MaxSplits('-', 1));
    int first = 0;
    int last = 0;
    auto is_rank = [](absl::string_view text, int* rank) {
      return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
             absl::SimpleAtoi(text, rank) && *rank <= kMaxConsoleRank;
    };
    if (!is_rank(ends[0], &first) || (ends.size() == 2 && !is_rank(ends[1], &last))) {
      return BadValue(flag, value,
                      absl::StrCat("'", item, "' is not a rank or a range like 3-5 (ranks 0..",
                                   kMaxConsoleRank, ")"));
    }
    if (ends.size() == 1) last = first;
    if (last < first) {
      return BadValue(flag, value, absl::StrCat("range '", item, "' ends before it starts"));
    }
    for (int rank = first; rank <= last; ++rank) ranks.insert(rank);
  }
  options.console_ranks = std::move(ranks);
  return absl::OkStatus();
}

absl::Status SetLauncher(absl::string_view flag, const std::string& value,
                         LauncherOptions& options) {
  if (value == "local") {
    options.launcher = LauncherKind::kLocal;
  } else if (value == "ssh") {
    options.launcher = LauncherKind::kSsh;
  } else if (value == "static") {
    options.launcher = LauncherKind::kStatic;
  } else if (value == "slurm") {
    options.launcher = LauncherKind::kSlurm;
  } else {
    return BadValue(flag, value, "expected local, ssh, slurm or static");
  }
  return absl::OkStatus();
}

absl::Status SetAgents(absl::string_view flag, const std::string& value,
                       LauncherOptions& options) {
  std::vector<std::string> agents;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    if (item.empty()) return BadValue(flag, value, "empty entry in the list");
    auto address = ParseHostPort(std::string(item), std::string(flag));
    if (!address.ok()) return address.status();
    if (address->host.empty() || address->port == 0) {
      return BadValue(flag, value, absl::StrCat("'", item, "' needs a host and a nonzero port"));
    }
    std::string normalized = address->ToString();
    if (std::find(agents.begin(), agents.end(), normalized) != agents.end()) {
      return BadValue(flag, value, absl::StrCat("agent '", normalized, "' is listed twice"));
    }
    if (agents.size() == static_cast<size_t>(kMaxHosts)) {
      return BadValue(flag, absl::StrCat(value.substr(0, 64), "..."),
                      absl::StrCat("more than ", kMaxHosts, " agents"));
    }
    agents.push_back(std::move(normalized));
  }
  options.agents = std::move(agents);
  return absl::OkStatus();
}

absl::Status SetJobId(absl::string_view flag, const std::string& value, LauncherOptions& options) {
  // The id names log files and directories, so nothing that a path or a shell
  // could read as special.
  for (char c : value) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return BadValue(flag, value, "only letters, digits, '-', '_' and '.' are allowed");
    }
  }
  if (value == "." || value == "..") return BadValue(flag, value, "not a usable id");
  options.job_id = value;
  return absl::OkStatus();
}

// The registry. Order is the order of --help.
constexpr OptionRow kOptions[] = {
    {"--hostfile", "-H", ValueKind::kText, "PATH", "",
     "DeepSpeed hostfile: one 'HOST slots=N' per line",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.hostfile = v;
       o.hostfile_given = true;
       return absl::OkStatus();
     }},
    {"--num_nodes", "", ValueKind::kText, "N|MIN:MAX", "all hosts",
     "first N hosts (N <= 65536); MIN:MAX: elastic (see --min_nodes)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       const size_t colon = v.find(':');
       if (colon == std::string::npos) return SetInt(f, v, 1, kMaxHosts, &o.num_nodes);
       absl::Status min = SetInt(f, v.substr(0, colon), 1, kMaxHosts, &o.min_nodes);
       if (!min.ok()) return min;
       absl::Status max = SetInt(f, v.substr(colon + 1), 1, kMaxHosts, &o.num_nodes);
       if (!max.ok()) return max;
       if (o.min_nodes > o.num_nodes) return BadValue(f, v, "MIN is larger than MAX");
       return absl::OkStatus();
     }},
    {"--min_nodes", "", ValueKind::kInteger, "N", "all",
     "elastic: restart without lost hosts while N remain",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt(f, v, 1, kMaxHosts, &o.min_nodes);
     }},
    {"--num_gpus", "", ValueKind::kInteger, "G", "all slots",
     "run on devices 0..G-1 of each host (G <= 1024)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt(f, v, 1, kMaxSlotsPerHost, &o.num_gpus);
     }},
    {"--include", "-i", ValueKind::kText, "HOSTS", "",
     "only these hosts and slots: host[:slot[,slot]][@host[:slot...]]",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.include = v;
       return absl::OkStatus();
     }},
    {"--exclude", "-e", ValueKind::kText, "HOSTS", "",
     "every host and slot but these (syntax of --include)",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.exclude = v;
       return absl::OkStatus();
     }},
    {"--master_addr", "", ValueKind::kText, "ADDR", "rank 0's host",
     "MASTER_ADDR given to every rank",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.master_addr = v;
       return absl::OkStatus();
     }},
    {"--master_port", "", ValueKind::kInteger, "PORT", "0: a free port on rank 0's host",
     "MASTER_PORT given to every rank",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt(f, v, 0, 65535, &o.master_port);
     }},
    {"--no_local_rank", "", ValueKind::kFlag, "", "",
     "do not append --local_rank=N to the program's arguments",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.no_local_rank = true;
       return absl::OkStatus();
     }},
    {"--bind_cores_to_rank", "", ValueKind::kFlag, "", "",
     "bind each rank of a host to cores (and a NUMA node) of its own; OMP_NUM_THREADS=cores",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.bind_cores_to_rank = true;
       return absl::OkStatus();
     }},
    {"--bind_core_list", "", ValueKind::kText, "CORES", "all of them",
     "with --bind_cores_to_rank: the cores to share, e.g. 0-15,32-47",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       auto cores = ParseCoreList(v, "--bind_core_list");
       if (!cores.ok()) return cores.status();
       o.bind_core_list = FormatCoreList(*cores);
       return absl::OkStatus();
     }},
    {"--run_as", "", ValueKind::kText, "USER", "",
     "run the ranks as USER, a name or uid (agents allow it with --allow_run_as)",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       if (v.empty() || v.size() > 64 || !std::all_of(v.begin(), v.end(), [](char c) {
             return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
           })) {
         return absl::InvalidArgumentError(absl::StrCat(
             "--run_as '", v, "': a user name or uid (letters, digits, '_', '-', '.'; at most 64)"));
       }
       o.run_as = v;
       return absl::OkStatus();
     }},
    {"--log_dir", "", ValueKind::kText, "DIR", "",
     "write each rank's output and the job's events.jsonl under DIR/JOB_ID",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.log_dir = v;
       return absl::OkStatus();
     }},
    {"--journal", "", ValueKind::kFlag, "", "",
     "with --agents and --log_dir: journal the job (its credential too) for --resume_job",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.journal = true;
       return absl::OkStatus();
     }},
    {"--resume_job", "", ValueKind::kText, "JOB_DIR", "",
     "take over a job on --agents whose dslaunch died (JOB_DIR: its --log_dir/JOB_ID)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       if (v.empty()) return absl::InvalidArgumentError(absl::StrCat(f, " needs the job's folder (--log_dir/JOB_ID)"));
       o.resume_job = v;
       return absl::OkStatus();
     }},
    {"--console_ranks", "", ValueKind::kText, "LIST", "all ranks",
     "only these ranks print to the console, e.g. 0,3-5",
     SetConsoleRanks},
    {"--no_prefix", "", ValueKind::kFlag, "", "",
     "print console lines without the [host:rank] prefix",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.no_prefix = true;
       return absl::OkStatus();
     }},
    {"--launcher", "", ValueKind::kText, "KIND", "auto",
     "local, ssh, slurm or static; auto: local for this host alone, else ssh",
     SetLauncher},
    {"--force_multi", "", ValueKind::kFlag, "", "",
     "start agents over ssh even for this machine alone (DeepSpeed's flag; = --launcher ssh)",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.force_multi = true;
       return absl::OkStatus();
     }},
    {"--agents", "", ValueKind::kText, "LIST", "",
     "running agents host:port,host:port (implies --launcher static)",
     SetAgents},
    {"--token_file", "", ValueKind::kText, "FILE", "",
     "file holding the token that agents require",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.token_file = v;
       return absl::OkStatus();
     }},
    {"--tls_dir", "", ValueKind::kText, "DIR", "",
     "mutual TLS: ca.crt, tls.crt, tls.key (dslaunch certs); started agents get the same path",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.tls_dir = v;
       return absl::OkStatus();
     }},
    {"--max_restarts", "", ValueKind::kInteger, "N", "0",
     "restart the whole job up to N times after a rank fails",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt(f, v, 0, INT_MAX, &o.max_restarts);
     }},
    {"--restart_backoff_ms", "", ValueKind::kInteger, "MS", "1000",
     "wait before restart 1; doubles for each further restart",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetBackoff(f, v, &o.restart_backoff_ms);
     }},
    {"--max_restart_backoff_ms", "", ValueKind::kInteger, "MS", "",
     "the longest wait between two attempts",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetBackoff(f, v, &o.max_restart_backoff_ms);
     },
     kDefaultMaxRestartBackoffMs},
    {"--dry_run", "", ValueKind::kFlag, "", "",
     "print what would run and start nothing",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.dry_run = true;
       return absl::OkStatus();
     }},
    {"--job_id", "", ValueKind::kText, "ID", "generated",
     "job name (letters, digits, - _ .)",
     SetJobId},
    {"--stop_grace_ms", "", ValueKind::kInteger, "MS", "",
     "time between SIGTERM and SIGKILL when stopping ranks; 0..3600000",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       auto value = ParseInteger(f, v, 0, kMaxStopGraceMs);
       if (value.ok()) o.stop_grace_ms = *value;
       return value.status();
     },
     kDefaultStopGraceMs},
    {"--lease_ms", "", ValueKind::kInteger, "MS", "",
     "agents stop ranks after this long without the controller; 500..86400000",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       auto value = ParseInteger(f, v, kMinLeaseMs, kMaxLeaseMs);
       if (value.ok()) o.lease_ms = *value;
       return value.status();
     },
     kDefaultLeaseMs},
    {"--preempt_grace_ms", "", ValueKind::kInteger, "MS", "",
     "on SIGTERM/SIGUSR1 ranks checkpoint in MS (0: stop; programs: if given)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       o.preempt_grace_given = true;
       return SetInt64(f, v, 0, &o.preempt_grace_ms);
     },
     kDefaultPreemptGraceMs},
    {"--hang_timeout_ms", "", ValueKind::kInteger, "MS", "0: off",
     "fail the attempt when the ranks' step stays for MS (armed at the first)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt64(f, v, 0, &o.hang_timeout_ms);
     }},
    {"--rejoin_check_ms", "", ValueKind::kInteger, "MS", "0: at restarts",
     "elastic: probe lost hosts every MS; rejoin at a checkpoint",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt64(f, v, 0, &o.rejoin_check_ms);
     }},
    {"--blacklist_after", "", ValueKind::kInteger, "N", "0: off",
     "elastic: keep out a host blamed for N failed attempts for a cooldown",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt(f, v, 0, INT_MAX, &o.blacklist_after);
     }},
    {"--blacklist_cooldown_ms", "", ValueKind::kInteger, "MS", "",
     "how long a blacklisted host stays out",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt64(f, v, 0, &o.blacklist_cooldown_ms);
     },
     kDefaultBlacklistCooldownMs},
    {"--heartbeat_timeout_ms", "", ValueKind::kInteger, "MS", "",
     "a live rank without heartbeats for MS fails as a hang (0: off)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       return SetInt64(f, v, 0, &o.heartbeat_timeout_ms);
     },
     kDefaultHeartbeatTimeoutMs},
    {"--agent_binary", "", ValueKind::kText, "PATH", "dsagent beside dslaunch, then PATH",
     "the dsagent executable to start",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.agent_binary = v;
       return absl::OkStatus();
     }},
    {"--ssh_command", "", ValueKind::kText, "CMD", "ssh",
     "remote shell, split on spaces; host and command are appended",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.ssh_command = v;
       return absl::OkStatus();
     }},
    {"--slurm_command", "", ValueKind::kText, "CMD", "srun --overlap",
     "--launcher slurm: starts each agent (+ --nodelist=HOST ...)",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.slurm_command = v;
       return absl::OkStatus();
     }},
    {"--controller_addr", "", ValueKind::kText, "ADDR", "picked automatically",
     "address ranks use to reach the controller's store",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.controller_addr = v;
       return absl::OkStatus();
     }},
    {"--metrics_addr", "", ValueKind::kText, "HOST:PORT", "off",
     "serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 0.0.0.0:9400)",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.metrics_addr = v;
       return absl::OkStatus();
     }},
    {"--agent_metrics_addr", "", ValueKind::kText, "ADDR", "off",
     "HOST:PORT: each agent dslaunch starts serves its ranks' /metrics there",
     [](absl::string_view flag, const std::string& v, LauncherOptions& o) {
       auto parsed = ParseHostPort(v, std::string(flag));
       if (!parsed.ok()) return parsed.status();
       o.agent_metrics_addr = v;
       return absl::OkStatus();
     }},
    {"--validate", "", ValueKind::kText, "FILE", "",
     "check a train.cfg or ds_config.json for these ranks; print it resolved; start nothing",
     [](absl::string_view, const std::string& v, LauncherOptions& o) {
       o.validate = v;
       return absl::OkStatus();
     }},
    {"--override", "", ValueKind::kText, "KEY=VALUE", "",
     "change a train.cfg or ds_config key, e.g. ds_config.gradient_clipping=1.0 (repeatable)",
     [](absl::string_view f, const std::string& v, LauncherOptions& o) {
       if (v.find('=') == std::string::npos || v.front() == '=') {
         return BadValue(f, v, "expected key.path=value");
       }
       o.overrides.push_back(v);
       return absl::OkStatus();
     }},
    {"--help", "-h", ValueKind::kFlag, "", "", "print this help",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.help = true;
       return absl::OkStatus();
     }},
    {"--version", "", ValueKind::kFlag, "", "", "print the version (common/version.h)",
     [](absl::string_view, const std::string&, LauncherOptions& o) {
       o.version = true;
       return absl::OkStatus();
     }},
};

// torchrun spells options with '-' (--max-restarts); accept that spelling for
// every option, since the table's names use '_' as DeepSpeed does.
std::string NormalizeName(absl::string_view name) {
  std::string normalized(name);
  if (absl::StartsWith(normalized, "--")) {
    std::replace(normalized.begin() + 2, normalized.end(), '-', '_');
  }
  return normalized;
}

const OptionRow* FindOption(absl::string_view name) {
  std::string normalized = NormalizeName(name);
  for (const OptionRow& row : kOptions) {
    if (row.name == normalized || (!row.alias.empty() && row.alias == name)) return &row;
  }
  return nullptr;
}

// What torchrun and DeepSpeed users type out of habit, and what it is here.
// An exact mapping names the option; the others say why there is none.
struct ForeignOption {
  absl::string_view name;  // normalized ('_'), as NormalizeName writes it
  absl::string_view ours;  // the dslaunch option, or empty
  absl::string_view note;  // where it comes from, or why there is no such option
};

constexpr ForeignOption kForeignOptions[] = {
    {"--nproc_per_node", "--num_gpus", "torchrun's ranks per node"},
    {"--nnodes", "--num_nodes", "torchrun's node count (MIN:MAX for an elastic range, as here)"},
    {"--num_accelerators", "--num_gpus", "ranks per node"},
    {"--standalone", "",
     "torchrun's single-node mode is what dslaunch does without a hostfile: drop the option"},
    {"--node_rank", "",
     "dslaunch starts every node itself (one command for the whole job): drop the option and give a --hostfile"},
    {"--rdzv_endpoint", "",
     "dslaunch runs the rendezvous itself; --master_addr/--master_port set what ranks see as MASTER_ADDR/PORT"},
    {"--rdzv_backend", "", "dslaunch runs the rendezvous itself: drop the option"},
    {"--rdzv_id", "--job_id", "torchrun's job id"},
    {"-m", "",
     "dslaunch runs PROGRAM as given and never adds python: write 'dslaunch [options] python3 -m MODULE ...'"},
    {"--module", "",
     "dslaunch runs PROGRAM as given and never adds python: write 'dslaunch [options] python3 -m MODULE ...'"},
    {"--no_python", "",
     "dslaunch never adds python in front of PROGRAM, so there is nothing to turn off: drop the option"},
};

absl::Status UnknownOption(absl::string_view name) {
  std::string normalized = NormalizeName(name);
  for (const ForeignOption& foreign : kForeignOptions) {
    if (foreign.name != normalized) continue;
    if (!foreign.ours.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", name, "' (", foreign.note,
                                                     "); did you mean '", foreign.ours, "'?"));
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown option '", name, "': ", foreign.note));
  }
  std::vector<std::string> names;
  for (const OptionRow& row : kOptions) names.emplace_back(row.name);
  // Suggest only what looks like a typo (the one rule of common/nearest_name.h):
  // naming an unrelated option would mislead more than help. The caller adds
  // where the options are listed.
  if (std::string nearest = NearestName(normalized, names); !nearest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown option '", name, "'; did you mean '", nearest, "'?"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown option '", name, "'"));
}

// DeepSpeed's launcher puts python in front of a script; dslaunch runs
// PROGRAM as given, so "dslaunch train.py" would look for train.py in PATH.
absl::Status CheckProgramIsRunnable(const std::vector<std::string>& program) {
  if (program.empty()) return absl::OkStatus();
  const std::string& first = program.front();
  if (!absl::EndsWith(first, ".py")) return absl::OkStatus();
  const bool has_path = first.find('/') != std::string::npos;
  if (has_path && ::access(first.c_str(), X_OK) == 0) return absl::OkStatus();  // an executable script
  return absl::InvalidArgumentError(absl::StrCat(
      "PROGRAM '", first, "' is a Python script", has_path ? " that is not executable" : "",
      "; dslaunch runs PROGRAM as given and does not add python in front of it as DeepSpeed's launcher does: "
      "write 'dslaunch [options] python3 ",
      first, program.size() > 1 ? " ..." : "", "'"));
}

bool LooksLikeOption(absl::string_view arg) { return arg.size() > 1 && arg[0] == '-'; }

}  // namespace

absl::StatusOr<LauncherOptions> ParseLauncherOptions(const std::vector<std::string>& argv) {
  LauncherOptions options;
  size_t i = 1;  // argv[0] is the launcher itself
  while (i < argv.size()) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    // Everything from the first non-option on belongs to the program, so that
    // its own flags (python train.py --lr 3e-4) are never read as ours.
    if (!LooksLikeOption(arg)) break;
    ++i;

    absl::string_view name = arg;
    std::optional<std::string> value;
    if (absl::StartsWith(arg, "--")) {
      if (size_t equals = arg.find('='); equals != std::string::npos) {
        name = absl::string_view(arg).substr(0, equals);
        value = arg.substr(equals + 1);
      }
    }
    const OptionRow* row = FindOption(name);
    if (row == nullptr) return UnknownOption(name);

    if (row->kind == ValueKind::kFlag) {
      if (value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '", row->name, "' takes no value (got '", arg, "')"));
      }
      value.emplace();
    } else if (!value.has_value()) {
      // "--hostfile --num_gpus 2" forgot the path. No value starts with "--",
      // but "-1" is taken as a value so that a negative number gets its own error.
      if (i == argv.size() || absl::StartsWith(argv[i], "--") || FindOption(argv[i]) != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '", row->name, "' needs a value (", row->metavar, ")"));
      }
      value = argv[i++];
    }
    if (row->kind != ValueKind::kFlag && value->empty()) {
      // Empty fields mean "not given"; an explicit empty value is usually an
      // unset shell variable (--hostfile $HOSTFILE), which must not pass silently.
      return absl::InvalidArgumentError(
          absl::StrCat("option '", row->name, "' needs a non-empty value (", row->metavar, ")"));
    }
    absl::Status status = row->set(row->name, *value, options);
    if (!status.ok()) return status;
    if (options.help || options.version) return options;  // the caller prints LauncherUsage() or the version
  }
  options.program.assign(argv.begin() + std::min(i, argv.size()), argv.end());
  // Note [Controller failover]: the job's own options come from its journal.
  if (!options.resume_job.empty()) {
    const bool alone = argv.size() == 3 || (argv.size() == 2 && absl::StartsWith(argv[1], "--resume_job="));
    if (!alone) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--resume_job takes no other option or program: the job's command line is in ", options.resume_job,
          "/controller.journal"));
    }
    return options;
  }

  if (options.force_multi) {
    // DeepSpeed runs a one-host job in place, even on a remote host, unless
    // --force_multi; dslaunch's auto launcher already uses ssh for a remote
    // host, so the flag matters only for this machine named in a hostfile.
    if (options.launcher != LauncherKind::kAuto && options.launcher != LauncherKind::kSsh) {
      return absl::InvalidArgumentError("--force_multi asks for the ssh launcher; it cannot be used with "
                                        "--launcher local, slurm or static (or --agents)");
    }
    if (!options.agents.empty()) {
      return absl::InvalidArgumentError("--force_multi asks for the ssh launcher; --agents names agents already "
                                        "running");
    }
    options.launcher = LauncherKind::kSsh;
  }
  if (!options.agents.empty()) {
    if (options.launcher == LauncherKind::kLocal || options.launcher == LauncherKind::kSsh ||
        options.launcher == LauncherKind::kSlurm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--agents cannot be used with --launcher ",
          options.launcher == LauncherKind::kLocal ? "local" : options.launcher == LauncherKind::kSsh ? "ssh" : "slurm",
          ": those start their own agents"));
    }
    options.launcher = LauncherKind::kStatic;
    if (!options.agent_metrics_addr.empty()) {
      return absl::InvalidArgumentError("--agent_metrics_addr is for the agents dslaunch starts; agents already "
                                        "running (--agents) serve /metrics with their own dsagent --metrics_addr");
    }
  } else if (options.launcher == LauncherKind::kStatic) {
    return absl::InvalidArgumentError(
        "--launcher static needs --agents host:port,... (the agents already running)");
  }
  // Note [Controller failover]: only agents that outlive dslaunch can be
  // taken over, and the journal lives in the job's log folder.
  if (options.journal && (options.agents.empty() || options.log_dir.empty())) {
    return absl::InvalidArgumentError(
        "--journal needs --agents (agents that outlive dslaunch; those it starts die with it) and --log_dir "
        "(the journal goes to --log_dir/JOB_ID/controller.journal)");
  }
  if (!options.bind_core_list.empty() && !options.bind_cores_to_rank) {
    return absl::InvalidArgumentError("--bind_core_list names the cores --bind_cores_to_rank shares out; add "
                                      "--bind_cores_to_rank");
  }
  if (options.program.empty() && options.validate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("missing PROGRAM: ", kUsageLine));
  }
  if (absl::Status runnable = CheckProgramIsRunnable(options.program); !runnable.ok()) return runnable;
  return options;
}

std::string LauncherUsage() {
  auto left_column = [](const OptionRow& row) {
    std::string text = absl::StrCat("  ", row.alias, row.alias.empty() ? "" : ", ", row.name);
    if (row.kind != ValueKind::kFlag) absl::StrAppend(&text, " ", row.metavar);
    return text;
  };
  size_t width = 0;
  for (const OptionRow& row : kOptions) width = std::max(width, left_column(row).size());

  std::string usage = absl::StrCat(
      kUsageLine, "\n\n",
      "Runs PROGRAM with ARGS once per selected slot of the hostfile's hosts. Options come\n"
      "before PROGRAM; everything from PROGRAM on (or after \"--\") is passed through.\n"
      "Long options also accept --name=value and '-' for '_' (--max-restarts).\n\n"
      "subcommands (each with its own --help):\n"
      "  dslaunch status [--job ID] [--watch]   a running job's state, steps and ranks\n"
      "  dslaunch estimate --model JOB.cfg      memory a job needs, per GPU and host\n"
      "  dslaunch plot RUN_DIR                  a run's csv_monitor curves as plot.png and plot.html\n"
      "  dslaunch report                        versions, GPUs, kernels: what to check when something is off\n"
      "  dslaunch certs --out DIR --hosts LIST  a CA and a --tls_dir folder per host (mutual TLS)\n\n"
      "options:\n");
  for (const OptionRow& row : kOptions) {
    std::string left = left_column(row);
    absl::StrAppend(&usage, left, std::string(width + 2 - left.size(), ' '), row.doc);
    if (!row.default_text.empty()) absl::StrAppend(&usage, " (default: ", row.default_text, ")");
    if (row.default_text.empty() && row.default_number >= 0) {
      absl::StrAppend(&usage, " (default: ", row.default_number, ")");
    }
    absl::StrAppend(&usage, "\n");
  }
  return usage;
}

}  // namespace dslaunch
