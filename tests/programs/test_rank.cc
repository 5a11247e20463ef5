// The rank program the integration tests launch. Each flag adds one behaviour:
//   --check_env         verify the rank environment contract, print ENV_OK
//   --store             meet every rank at a store barrier and agree on a value
//   --pid_dir DIR       write DIR/rank_<RANK>.pid (and the child's pid with --spawn_child)
//   --spawn_child       start a child that sleeps forever (an orphan candidate)
//   --sleep_ms MS       stay alive this long (after the other steps)
//   --until_file PATH   with --sleep_ms: end early, with 0, once PATH exists
//                       (a test ends a rank on its own event, not a guessed time)
//   --hold_attempt A    on attempt A, stay alive until stopped (up to 120 s)
//                       instead of --sleep_ms (ranks a failure must stop, however
//                       slow the stop on a loaded machine)
//   --fail_rank R --fail_code C [--fail_after_ms MS] [--fail_attempt A]
//                       rank R exits with C (or, with C > 128, kills itself with C-128),
//                       only on attempt A when given
//   --ignore_sigterm    ignore SIGTERM (the agent must escalate to SIGKILL)
//   --stderr_lines N    write N numbered lines to stderr before anything else
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/store_client.h"

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

int EnvInt(const char* name) {
  int value = -1;
  if (!absl::SimpleAtoi(Env(name), &value)) return -1;
  return value;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "test_rank %s: %s\n", Env("RANK").c_str(), message.c_str());
  return 3;
}

}  // namespace

namespace {

// Written whole or not at all (a temporary file renamed into place): a rank
// stopped right after it started must not leave an empty pid file, which a
// test would read as the pid "" (test_static_agents did, under load).
void WritePidFile(const std::string& path, pid_t pid) {
  const std::string partial = path + ".partial";
  { std::ofstream(partial) << pid << "\n"; }
  std::rename(partial.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  bool check_env = false, use_store = false, spawn_child = false, ignore_sigterm = false;
  int sleep_ms = 0, fail_rank = -1, fail_code = 1, fail_after_ms = 0, fail_attempt = -1;
  int stderr_lines = 0, local_rank_arg = -1, hold_attempt = -1;
  std::string pid_dir, until_file;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next_int = [&](int* out) {
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[++i], out)) std::exit(Fail("bad number for " + arg));
    };
    if (arg == "--check_env") check_env = true;
    else if (arg == "--store") use_store = true;
    else if (arg == "--spawn_child") spawn_child = true;
    else if (arg == "--ignore_sigterm") ignore_sigterm = true;
    else if (arg == "--pid_dir" && i + 1 < argc) pid_dir = argv[++i];
    else if (arg == "--until_file" && i + 1 < argc) until_file = argv[++i];
    else if (arg == "--sleep_ms") next_int(&sleep_ms);
    else if (arg == "--fail_rank") next_int(&fail_rank);
    else if (arg == "--fail_code") next_int(&fail_code);
    else if (arg == "--fail_after_ms") next_int(&fail_after_ms);
    else if (arg == "--fail_attempt") next_int(&fail_attempt);
    else if (arg == "--stderr_lines") next_int(&stderr_lines);
    else if (arg == "--hold_attempt") next_int(&hold_attempt);
    else if (arg.rfind("--local_rank=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(13), &local_rank_arg)) return Fail("bad " + arg);
    } else {
      return Fail("unknown argument " + arg);
    }
  }
  if (ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  const int rank = EnvInt("RANK");
  const int world = EnvInt("WORLD_SIZE");
  const int attempt = EnvInt("DSLAUNCH_ATTEMPT");
  for (int i = 0; i < stderr_lines; ++i) std::fprintf(stderr, "stderr line %d of rank %d\n", i, rank);
  std::fflush(stderr);

  if (!pid_dir.empty()) WritePidFile(absl::StrCat(pid_dir, "/rank_", rank, ".pid"), ::getpid());
  if (spawn_child) {
    pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "1000", nullptr);
      ::_exit(127);
    }
    if (!pid_dir.empty()) WritePidFile(absl::StrCat(pid_dir, "/child_", rank, ".pid"), child);
  }

  if (check_env) {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "CROSS_RANK",
          "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
          "OMP_NUM_THREADS", "DSLAUNCH_JOB_ID", "DSLAUNCH_ATTEMPT", "DSLAUNCH_STORE_ADDR"}) {
      if (Env(name).empty()) return Fail(absl::StrCat(name, " is not set"));
    }
    const int local_rank = EnvInt("LOCAL_RANK");
    const int local_world = EnvInt("LOCAL_WORLD_SIZE");
    if (rank < 0 || rank >= world) return Fail("RANK outside [0, WORLD_SIZE)");
    if (local_rank < 0 || local_rank >= local_world) return Fail("LOCAL_RANK outside [0, LOCAL_WORLD_SIZE)");
    if (local_rank_arg >= 0 && local_rank_arg != local_rank) return Fail("--local_rank disagrees with LOCAL_RANK");
    if (EnvInt("CROSS_RANK") != EnvInt("GROUP_RANK")) return Fail("CROSS_RANK != GROUP_RANK");
    std::vector<std::string> devices = absl::StrSplit(Env("CUDA_VISIBLE_DEVICES"), ',');
    if (static_cast<int>(devices.size()) != local_world) return Fail("CUDA_VISIBLE_DEVICES does not list LOCAL_WORLD_SIZE devices");
    if (Env("TORCHELASTIC_RESTART_COUNT") != Env("DSLAUNCH_ATTEMPT")) return Fail("restart count != attempt");
    if (Env("TORCHELASTIC_RUN_ID") != Env("DSLAUNCH_JOB_ID")) return Fail("run id != job id");
    int port = EnvInt("MASTER_PORT");
    if (port <= 0 || port > 65535) return Fail("MASTER_PORT is not a port");
    std::printf("ENV_OK rank=%d local_rank=%d world=%d node=%s cvd=%s master=%s:%s attempt=%d\n", rank,
                local_rank, world, Env("GROUP_RANK").c_str(), Env("CUDA_VISIBLE_DEVICES").c_str(),
                Env("MASTER_ADDR").c_str(), Env("MASTER_PORT").c_str(), attempt);
  }

  if (use_store) {
    auto store = dslaunch::StoreClient::FromEnvironment();
    if (!store.ok()) return Fail(std::string(store.status().message()));
    if (absl::Status s = (*store)->Set(absl::StrCat("rank/", rank), Env("GROUP_RANK")); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    if (absl::Status s = (*store)->Barrier("start", world, 60s); !s.ok()) return Fail(std::string(s.message()));
    // After the barrier every rank's key must be there.
    for (int r = 0; r < world; ++r) {
      auto value = (*store)->Get(absl::StrCat("rank/", r));
      if (!value.ok() || !value->has_value()) return Fail(absl::StrCat("rank/", r, " missing after the barrier"));
    }
    auto counter = (*store)->Add("arrivals", 1);
    if (!counter.ok()) return Fail(std::string(counter.status().message()));
    auto won = (*store)->CompareSet("leader", std::nullopt, absl::StrCat(rank));
    if (!won.ok()) return Fail(std::string(won.status().message()));
    if (absl::Status s = (*store)->Barrier("elected", world, 60s); !s.ok()) return Fail(std::string(s.message()));
    auto leader = (*store)->Get("leader");
    if (!leader.ok() || !leader->has_value()) return Fail("no leader");
    std::printf("STORE_OK rank=%d leader=%s\n", rank, (*leader)->c_str());
  }
  std::fflush(stdout);

  if (rank == fail_rank && (fail_attempt < 0 || fail_attempt == attempt)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(fail_after_ms));
    std::fprintf(stderr, "rank %d failing on purpose with %d\n", rank, fail_code);
    std::fflush(stderr);
    if (fail_code > 128) ::kill(::getpid(), fail_code - 128);
    return fail_code;
  }
  if (hold_attempt >= 0 && attempt == hold_attempt) sleep_ms = 120000;
  const auto stay_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(sleep_ms);
  if (until_file.empty()) {
    std::this_thread::sleep_until(stay_until);
    return 0;
  }
  struct stat st;
  while (::stat(until_file.c_str(), &st) != 0 && std::chrono::steady_clock::now() < stay_until) {
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}
