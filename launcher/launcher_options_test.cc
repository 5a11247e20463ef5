#include "launcher/launcher_options.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// argv with "dslaunch" as argv[0], which the parser skips.
absl::StatusOr<LauncherOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dslaunch");
  return ParseLauncherOptions(args);
}

// The error message of a parse that must fail.
std::string ErrorOf(std::vector<std::string> args) {
  auto options = Parse(args);
  if (options.ok()) return "<parsed without error>";
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(options.status().message());
}

TEST(LauncherOptions, DefaultsWithOnlyAProgram) {
  auto options = Parse({"train"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->hostfile, "");
  EXPECT_FALSE(options->hostfile_given);
  EXPECT_EQ(options->num_nodes, -1);
  EXPECT_EQ(options->num_gpus, -1);
  EXPECT_EQ(options->master_port, 0);
  EXPECT_FALSE(options->no_local_rank);
  EXPECT_THAT(options->console_ranks, IsEmpty());
  EXPECT_EQ(options->launcher, LauncherKind::kAuto);
  EXPECT_THAT(options->agents, IsEmpty());
  EXPECT_EQ(options->max_restarts, 0);
  EXPECT_EQ(options->restart_backoff_ms, 1000);
  EXPECT_EQ(options->max_restart_backoff_ms, 30000);
  EXPECT_FALSE(options->dry_run);
  EXPECT_EQ(options->stop_grace_ms, 3000);
  EXPECT_EQ(options->lease_ms, 10000);
  EXPECT_EQ(options->ssh_command, "ssh");
  EXPECT_FALSE(options->help);
  EXPECT_THAT(options->program, ElementsAre("train"));
}

TEST(LauncherOptions, ProgramAndItsArgumentsPassThroughUntouched) {
  auto options = Parse({"--num_gpus", "2", "python", "train.py", "--lr", "3e-4", "--num_gpus=9",
                        "--", "-h"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->num_gpus, 2);
  EXPECT_FALSE(options->help);
  EXPECT_THAT(options->program,
              ElementsAre("python", "train.py", "--lr", "3e-4", "--num_gpus=9", "--", "-h"));
}

TEST(LauncherOptions, DoubleDashEndsOptions) {
  auto options = Parse({"--dry_run", "--", "--weird-program", "x"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->dry_run);
  EXPECT_THAT(options->program, ElementsAre("--weird-program", "x"));
}

TEST(LauncherOptions, EveryOptionInBothForms) {
  for (bool with_equals : {false, true}) {
    std::vector<std::pair<std::string, std::string>> pairs = {
        {"--hostfile", "/job/hosts"},         {"--num_nodes", "2"},
        {"--num_gpus", "4"},                  {"--master_addr", "10.0.0.1"},
        {"--master_port", "29500"},           {"--log_dir", "/tmp/logs"},
        {"--console_ranks", "0,3-5,4"},       {"--launcher", "ssh"},
        {"--token_file", "/etc/token"},       {"--max_restarts", "3"},
        {"--job_id", "run-1_a.b"},            {"--stop_grace_ms", "60000"},
        {"--lease_ms", "500"},                {"--agent_binary", "/opt/dsagent"},
        {"--ssh_command", "ssh -p 2222"},     {"--controller_addr", "10.0.0.9"},
    };
    std::vector<std::string> args;
    for (const auto& [name, value] : pairs) {
      if (with_equals) {
        args.push_back(name + "=" + value);
      } else {
        args.push_back(name);
        args.push_back(value);
      }
    }
    args.insert(args.end(), {"--no_local_rank", "--no_prefix", "--dry_run", "prog"});
    auto options = Parse(args);
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->hostfile, "/job/hosts");
    EXPECT_TRUE(options->hostfile_given);
    EXPECT_EQ(options->num_nodes, 2);
    EXPECT_EQ(options->num_gpus, 4);
    EXPECT_EQ(options->master_addr, "10.0.0.1");
    EXPECT_EQ(options->master_port, 29500);
    EXPECT_EQ(options->log_dir, "/tmp/logs");
    EXPECT_EQ(options->console_ranks, (std::set<int>{0, 3, 4, 5}));
    EXPECT_EQ(options->launcher, LauncherKind::kSsh);
    EXPECT_EQ(options->token_file, "/etc/token");
    EXPECT_EQ(options->max_restarts, 3);
    EXPECT_EQ(options->job_id, "run-1_a.b");
    EXPECT_EQ(options->stop_grace_ms, 60000);
    EXPECT_EQ(options->lease_ms, 500);
    EXPECT_EQ(options->agent_binary, "/opt/dsagent");
    EXPECT_EQ(options->ssh_command, "ssh -p 2222");
    EXPECT_EQ(options->controller_addr, "10.0.0.9");
    EXPECT_TRUE(options->no_local_rank);
    EXPECT_TRUE(options->no_prefix);
    EXPECT_TRUE(options->dry_run);
    EXPECT_THAT(options->program, ElementsAre("prog"));
  }
}

TEST(LauncherOptions, ShortAliasesAndValuesContainingEquals) {
  auto include = Parse({"-i", "worker-0:0,2@worker-1", "prog"});
  ASSERT_TRUE(include.ok()) << include.status();
  EXPECT_EQ(include->include, "worker-0:0,2@worker-1");
  auto exclude = Parse({"-e", "worker-1", "--ssh_command=ssh -o A=B", "prog"});
  ASSERT_TRUE(exclude.ok()) << exclude.status();
  EXPECT_EQ(exclude->exclude, "worker-1");
  EXPECT_EQ(exclude->ssh_command, "ssh -o A=B");
  auto long_form = Parse({"--include=w:1", "prog"});
  ASSERT_TRUE(long_form.ok()) << long_form.status();
  EXPECT_EQ(long_form->include, "w:1");
}

TEST(LauncherOptions, TorchrunHyphenSpellingIsAccepted) {
  auto options = Parse({"--max-restarts", "2", "--log-dir=/l", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_restarts, 2);
  EXPECT_EQ(options->log_dir, "/l");
}

TEST(LauncherOptions, LaterValueWins) {
  auto options = Parse({"--num_gpus", "2", "--num_gpus=3", "--console_ranks", "1",
                        "--console_ranks", "2", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->num_gpus, 3);
  EXPECT_EQ(options->console_ranks, (std::set<int>{2}));
}

TEST(LauncherOptions, HelpNeedsNoProgram) {
  for (const char* flag : {"-h", "--help"}) {
    auto options = Parse({"--num_gpus", "1", flag});
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_TRUE(options->help);
  }
}

TEST(LauncherOptions, MissingProgramIsAnError) {
  EXPECT_THAT(ErrorOf({}),
              HasSubstr("missing PROGRAM: usage: dslaunch [options] PROGRAM [ARGS...]"));
  EXPECT_THAT(ErrorOf({"--num_gpus", "2", "--"}), HasSubstr("missing PROGRAM"));
  // argv[0] alone is not a program.
  auto options = ParseLauncherOptions({"dslaunch"});
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(options.status().message(), HasSubstr("missing PROGRAM"));
}

TEST(LauncherOptions, UnknownOptionNamesTheNearest) {
  EXPECT_THAT(ErrorOf({"--num_gpu", "2", "prog"}),
              HasSubstr("unknown option '--num_gpu'; did you mean '--num_gpus'?"));
  EXPECT_THAT(ErrorOf({"--hostfle=h", "prog"}),
              HasSubstr("unknown option '--hostfle'; did you mean '--hostfile'?"));
  EXPECT_THAT(ErrorOf({"-num_nodes", "1", "prog"}),
              HasSubstr("unknown option '-num_nodes'; did you mean '--num_nodes'?"));
  std::string far = ErrorOf({"--sequence_parallel", "8", "prog"});
  EXPECT_THAT(far, HasSubstr("unknown option '--sequence_parallel'"));
  EXPECT_THAT(far, Not(HasSubstr("did you mean")));
  EXPECT_THAT(ErrorOf({"-x", "prog"}), HasSubstr("unknown option '-x'"));
  // The caller (dslaunch's main) says where the options are listed, once.
  EXPECT_THAT(ErrorOf({"--num_gpu", "2", "prog"}), Not(HasSubstr("--help")));
  EXPECT_THAT(ErrorOf({"-x", "prog"}), Not(HasSubstr("--help")));
}

TEST(LauncherOptions, TorchrunAndDeepSpeedSpellingsAreMapped) {
  EXPECT_THAT(ErrorOf({"--nproc_per_node", "8", "prog"}),
              HasSubstr("unknown option '--nproc_per_node' (torchrun's ranks per node); did you mean '--num_gpus'?"));
  EXPECT_THAT(ErrorOf({"--nproc-per-node=8", "prog"}), HasSubstr("did you mean '--num_gpus'?"));
  EXPECT_THAT(ErrorOf({"--nnodes", "2", "prog"}), HasSubstr("did you mean '--num_nodes'?"));
  EXPECT_THAT(ErrorOf({"--num_accelerators", "2", "prog"}), HasSubstr("did you mean '--num_gpus'?"));
  EXPECT_THAT(ErrorOf({"--standalone", "prog"}), HasSubstr("what dslaunch does without a hostfile"));
  EXPECT_THAT(ErrorOf({"-m", "pkg.train"}), HasSubstr("'dslaunch [options] python3 -m MODULE ...'"));
  EXPECT_THAT(ErrorOf({"--module", "pkg.train"}), HasSubstr("python3 -m MODULE"));
  EXPECT_THAT(ErrorOf({"--no_python", "prog"}), HasSubstr("never adds python"));
  EXPECT_THAT(ErrorOf({"--node_rank", "0", "prog"}), HasSubstr("starts every node itself"));
}

TEST(LauncherOptions, PythonScriptAsProgramSuggestsTheInterpreter) {
  EXPECT_THAT(ErrorOf({"train.py", "--lr", "1"}),
              HasSubstr("PROGRAM 'train.py' is a Python script; dslaunch runs PROGRAM as given and does not add "
                        "python in front of it as DeepSpeed's launcher does: write 'dslaunch [options] python3 "
                        "train.py ...'"));
  EXPECT_THAT(ErrorOf({"/nonexistent/dir/train.py"}), HasSubstr("that is not executable"));
  // With the interpreter it is the interpreter's argument, not the program.
  EXPECT_TRUE(Parse({"python3", "train.py"}).ok());
}

TEST(LauncherOptions, DeepSpeedShortHostfileOption) {
  auto options = Parse({"-H", "hosts", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->hostfile, "hosts");
  EXPECT_TRUE(options->hostfile_given);
}

TEST(LauncherOptions, MissingValueIsAnError) {
  EXPECT_THAT(ErrorOf({"--hostfile"}), HasSubstr("option '--hostfile' needs a value (PATH)"));
  EXPECT_THAT(ErrorOf({"--hostfile", "--num_gpus", "2", "prog"}),
              HasSubstr("option '--hostfile' needs a value"));
  EXPECT_THAT(ErrorOf({"--ssh_command", "--bogus", "prog"}),
              HasSubstr("option '--ssh_command' needs a value (CMD)"));
  EXPECT_THAT(ErrorOf({"-i", "-e", "w", "prog"}), HasSubstr("option '--include' needs a value"));
  EXPECT_THAT(ErrorOf({"--hostfile=", "prog"}),
              HasSubstr("option '--hostfile' needs a non-empty value"));
  EXPECT_THAT(ErrorOf({"--log_dir", "", "prog"}),
              HasSubstr("option '--log_dir' needs a non-empty value"));
}

TEST(LauncherOptions, BooleanFlagsTakeNoValue) {
  EXPECT_THAT(ErrorOf({"--dry_run=true", "prog"}),
              HasSubstr("option '--dry_run' takes no value (got '--dry_run=true')"));
  EXPECT_THAT(ErrorOf({"--no_prefix=false", "prog"}), HasSubstr("'--no_prefix' takes no value"));
}

TEST(LauncherOptions, NumbersMustBeIntegersInRange) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--num_gpus", "two"}, "--num_gpus 'two': not an integer"},
           {{"--num_gpus", "2.5"}, "--num_gpus '2.5': not an integer"},
           {{"--num_gpus", "+2"}, "--num_gpus '+2': not an integer"},
           {{"--num_gpus", "-"}, "--num_gpus '-': not an integer"},
           {{"--num_gpus", "-1"}, "--num_gpus '-1': must not be negative"},
           {{"--num_nodes=0"}, "--num_nodes '0': must be in 1..65536"},
           {{"--num_nodes", "99999999999"}, "--num_nodes '99999999999': must be in 1..65536"},
           {{"--num_nodes", "65537"}, "--num_nodes '65537': must be in 1..65536"},
           {{"--num_nodes", "2:65537"}, "--num_nodes '65537': must be in 1..65536"},
           {{"--min_nodes", "65537"}, "--min_nodes '65537': must be in 1..65536"},
           // Before: 18 GB of slot lists, then std::bad_alloc (issue 13, finding 7).
           {{"--num_gpus", "2147483647"}, "--num_gpus '2147483647': must be in 1..1024"},
           {{"--num_gpus", "1025"}, "--num_gpus '1025': must be in 1..1024"},
           {{"--blacklist_after", "4294967297"}, "--blacklist_after '4294967297': too large"},
           {{"--master_port", "65536"}, "--master_port '65536': must be in 0..65535"},
           {{"--master_port", "-5"}, "--master_port '-5': must not be negative"},
           {{"--max_restarts", "-1"}, "--max_restarts '-1': must not be negative"},
           {{"--stop_grace_ms", "-100"}, "--stop_grace_ms '-100': must not be negative"},
           {{"--stop_grace_ms", "99999999999999999999"}, "--stop_grace_ms '99999999999999999999': must be in 0..3600000"},
           // Issue 13: 9223372036854 overflowed the agents' kill deadline and
           // left a SIGTERM-ignoring rank running; the bounds are checked here.
           {{"--stop_grace_ms", "9223372036854"}, "--stop_grace_ms '9223372036854': must be in 0..3600000"},
           {{"--stop_grace_ms", "3600001"}, "--stop_grace_ms '3600001': must be in 0..3600000"},
           {{"--lease_ms", "499"}, "--lease_ms '499': must be in 500..86400000"},
           {{"--lease_ms", "8600000000"}, "--lease_ms '8600000000': must be in 500..86400000"},
           {{"--restart_backoff_ms", "-1"}, "--restart_backoff_ms '-1': must not be negative"},
           {{"--max_restart_backoff_ms", "86400001"},
            "--max_restart_backoff_ms '86400001': must be in 0..86400000"},
       }) {
    std::vector<std::string> args = c.args;
    args.push_back("prog");
    EXPECT_THAT(ErrorOf(args), HasSubstr(c.message)) << c.args[0];
  }
  auto edge = Parse({"--master_port", "65535", "--stop_grace_ms", "0", "--max_restarts", "0",
                     "--num_gpus", "1024", "--num_nodes", "65536", "prog"});
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(edge->num_gpus, 1024);
  EXPECT_EQ(edge->num_nodes, 65536);
  EXPECT_EQ(edge->master_port, 65535);
  EXPECT_EQ(edge->stop_grace_ms, 0);
  auto upper = Parse({"--stop_grace_ms", "3600000", "--lease_ms", "86400000", "prog"});
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_EQ(upper->stop_grace_ms, 3600000);
  EXPECT_EQ(upper->lease_ms, 86400000);
  auto backoff = Parse({"--restart_backoff_ms", "0", "--max-restart-backoff-ms=86400000", "prog"});
  ASSERT_TRUE(backoff.ok()) << backoff.status();
  EXPECT_EQ(backoff->restart_backoff_ms, 0);
  EXPECT_EQ(backoff->max_restart_backoff_ms, 86400000);
}

TEST(LauncherOptions, ConsoleRanks) {
  auto options = Parse({"--console_ranks", "7,0,2-4,3", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->console_ranks, (std::set<int>{0, 2, 3, 4, 7}));

  EXPECT_THAT(ErrorOf({"--console_ranks", "0,,1", "prog"}),
              HasSubstr("--console_ranks '0,,1': '' is not a rank or a range"));
  EXPECT_THAT(ErrorOf({"--console_ranks", "a", "prog"}), HasSubstr("'a' is not a rank"));
  EXPECT_THAT(ErrorOf({"--console_ranks=-1", "prog"}), HasSubstr("'-1' is not a rank"));
  EXPECT_THAT(ErrorOf({"--console_ranks", "3-", "prog"}), HasSubstr("'3-' is not a rank"));
  EXPECT_THAT(ErrorOf({"--console_ranks", "1-2-3", "prog"}), HasSubstr("'1-2-3' is not a rank"));
  EXPECT_THAT(ErrorOf({"--console_ranks", "5-3", "prog"}),
              HasSubstr("--console_ranks '5-3': range '5-3' ends before it starts"));
  EXPECT_THAT(ErrorOf({"--console_ranks", "0-99999999", "prog"}),
              HasSubstr("'0-99999999' is not a rank"));
}

TEST(LauncherOptions, LauncherKinds) {
  auto local = Parse({"--launcher", "local", "prog"});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->launcher, LauncherKind::kLocal);
  auto slurm = Parse({"--launcher", "slurm", "--slurm_command", "srun --overlap --gpus-per-node=8", "prog"});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(slurm->slurm_command, "srun --overlap --gpus-per-node=8");
  EXPECT_THAT(ErrorOf({"--launcher", "pbs", "prog"}),
              HasSubstr("--launcher 'pbs': expected local, ssh, slurm or static"));
  EXPECT_THAT(ErrorOf({"--launcher", "slurm", "--agents", "a:1", "prog"}),
              HasSubstr("--agents cannot be used with --launcher slurm"));
}

// DeepSpeed's --force_multi: the multi-node (ssh) path for one host.
TEST(LauncherOptions, ForceMultiIsTheSshLauncher) {
  auto options = Parse({"--force_multi", "-H", "hosts", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->launcher, LauncherKind::kSsh);
  auto with_ssh = Parse({"--force_multi", "--launcher", "ssh", "prog"});
  ASSERT_TRUE(with_ssh.ok()) << with_ssh.status();
  EXPECT_EQ(with_ssh->launcher, LauncherKind::kSsh);
  EXPECT_THAT(ErrorOf({"--force_multi", "--launcher", "local", "prog"}),
              HasSubstr("--force_multi asks for the ssh launcher; it cannot be used with --launcher local"));
  EXPECT_THAT(ErrorOf({"--force_multi", "--agents", "h:1", "prog"}), HasSubstr("--force_multi"));
}

TEST(LauncherOptions, AgentsImplyStatic) {
  auto options = Parse({"--agents", "10.0.0.2:7000,node-3:7001,[::1]:7002", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->launcher, LauncherKind::kStatic);
  EXPECT_THAT(options->agents, ElementsAre("10.0.0.2:7000", "node-3:7001", "[::1]:7002"));

  auto explicit_static = Parse({"--launcher=static", "--agents=h:1", "prog"});
  ASSERT_TRUE(explicit_static.ok()) << explicit_static.status();
  EXPECT_EQ(explicit_static->launcher, LauncherKind::kStatic);
  EXPECT_THAT(explicit_static->agents, ElementsAre("h:1"));
}

TEST(LauncherOptions, AgentsErrors) {
  EXPECT_THAT(ErrorOf({"--agents", "h:1", "--launcher", "local", "prog"}),
              HasSubstr("--agents cannot be used with --launcher local"));
  EXPECT_THAT(ErrorOf({"--launcher", "ssh", "--agents", "h:1", "prog"}),
              HasSubstr("--agents cannot be used with --launcher ssh"));
  EXPECT_THAT(ErrorOf({"--launcher", "static", "prog"}),
              HasSubstr("--launcher static needs --agents"));
  EXPECT_THAT(ErrorOf({"--agents", "nohost", "prog"}), HasSubstr("--agents"));
  EXPECT_THAT(ErrorOf({"--agents", "nohost", "prog"}), HasSubstr("nohost"));
  EXPECT_THAT(ErrorOf({"--agents", "h:99999", "prog"}), HasSubstr("99999"));
  EXPECT_THAT(ErrorOf({"--agents", "h:1,,g:2", "prog"}),
              HasSubstr("--agents 'h:1,,g:2': empty entry"));
  EXPECT_THAT(ErrorOf({"--agents", "h:0", "prog"}), HasSubstr("'h:0' needs a host and a nonzero"));
  EXPECT_THAT(ErrorOf({"--agents", "h:1,h:1", "prog"}), HasSubstr("agent 'h:1' is listed twice"));
  EXPECT_THAT(ErrorOf({"--agents", "h:1", "--agent_metrics_addr", "0.0.0.0:9401", "prog"}),
              HasSubstr("agents already running (--agents) serve /metrics with their own dsagent --metrics_addr"));
}

TEST(LauncherOptions, AgentMetricsAddressIsCheckedWhenGiven) {
  auto options = Parse({"--agent_metrics_addr", "0.0.0.0:9401", "prog"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->agent_metrics_addr, "0.0.0.0:9401");
  EXPECT_THAT(ErrorOf({"--agent_metrics_addr", "9401", "prog"}), HasSubstr("--agent_metrics_addr"));
}

TEST(LauncherOptions, JobIdCharacters) {
  EXPECT_THAT(ErrorOf({"--job_id", "a/b", "prog"}),
              HasSubstr("--job_id 'a/b': only letters, digits, '-', '_' and '.' are allowed"));
  EXPECT_THAT(ErrorOf({"--job_id", "a b", "prog"}), HasSubstr("--job_id 'a b'"));
  EXPECT_THAT(ErrorOf({"--job_id", "..", "prog"}), HasSubstr("--job_id '..'"));
}

TEST(LauncherOptions, VersionNeedsNoProgram) {
  auto options = Parse({"--version"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->version);
  EXPECT_THAT(ErrorOf({"--version=true"}), HasSubstr("takes no value"));
}

TEST(LauncherOptions, UsageListsEveryOptionWithDefaults) {
  std::string usage = LauncherUsage();
  EXPECT_THAT(usage, HasSubstr("usage: dslaunch [options] PROGRAM [ARGS...]"));
  for (const char* name :
       {"--hostfile PATH", "--num_nodes N", "--num_gpus G", "-i, --include HOSTS",
        "-e, --exclude HOSTS", "--master_addr", "--master_port PORT", "--no_local_rank",
        "--log_dir DIR", "--console_ranks LIST", "--no_prefix", "--launcher KIND",
        "--agents LIST", "--token_file", "--max_restarts N", "--restart_backoff_ms MS",
        "--max_restart_backoff_ms MS", "--dry_run", "--job_id ID",
        "--stop_grace_ms MS", "--lease_ms MS", "--agent_binary", "--ssh_command",
        "--controller_addr", "-h, --help", "--version"}) {
    EXPECT_THAT(usage, HasSubstr(name));
  }
  // The defaults shown must be the struct's defaults.
  LauncherOptions defaults;
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.stop_grace_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.lease_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + defaults.ssh_command + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.restart_backoff_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.max_restart_backoff_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.preempt_grace_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.heartbeat_timeout_ms) + ")"));
  EXPECT_THAT(usage, HasSubstr("(default: " + std::to_string(defaults.blacklist_cooldown_ms) + ")"));
  // Flags take no value, so --help shows no metavar for them.
  EXPECT_THAT(usage, testing::ContainsRegex("\n  --dry_run +print what would run"));
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    EXPECT_LE(line.size(), 120u) << line;
  }
}

}  // namespace
}  // namespace dslaunch
