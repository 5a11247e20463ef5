#include "agent/rank_keeper_protocol.h"

#include <charconv>

namespace dslaunch {
namespace {

constexpr std::string_view kSpecTag = "dsagent-keeper-spec-v3";
constexpr std::string_view kStarted = "started ";
constexpr std::string_view kFailed = "failed ";

void Put(std::string* out, std::string_view field) {
  out->append(field);
  out->push_back('\0');
}

// Reads the next NUL-terminated field of `data` from `*at`.
bool Take(std::string_view data, size_t* at, std::string_view* field) {
  size_t end = data.find('\0', *at);
  if (end == std::string_view::npos) return false;
  *field = data.substr(*at, end - *at);
  *at = end + 1;
  return true;
}

bool TakeCount(std::string_view data, size_t* at, size_t* count) {
  std::string_view field;
  if (!Take(data, at, &field) || field.empty()) return false;
  auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *count);
  return ec == std::errc() && end == field.data() + field.size();
}

bool TakeList(std::string_view data, size_t* at, std::vector<std::string>* list) {
  size_t count = 0;
  if (!TakeCount(data, at, &count) || count > data.size()) return false;
  list->clear();
  list->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    std::string_view field;
    if (!Take(data, at, &field)) return false;
    list->emplace_back(field);
  }
  return true;
}

constexpr int kEndSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

}  // namespace

sigset_t KeeperBlockedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kEndSignals) sigaddset(&set, sig);
  return set;
}

bool IsKeeperEndSignal(int sig) {
  for (int end : kEndSignals) {
    if (sig == end) return true;
  }
  return false;
}

std::string EncodeKeeperSpec(const KeeperSpec& spec) {
  std::string out;
  Put(&out, kSpecTag);
  Put(&out, spec.exe);
  Put(&out, spec.working_dir);
  Put(&out, std::to_string(spec.argv.size()));
  for (const auto& arg : spec.argv) Put(&out, arg);
  Put(&out, std::to_string(spec.env.size()));
  for (const auto& entry : spec.env) Put(&out, entry);
  Put(&out, std::to_string(spec.cpus.size()));
  for (int cpu : spec.cpus) Put(&out, std::to_string(cpu));
  Put(&out, std::to_string(spec.mem_node + 1));  // counts are unsigned: -1 travels as 0
  Put(&out, std::to_string(spec.uid + 1));
  Put(&out, std::to_string(spec.gid + 1));
  Put(&out, std::to_string(spec.groups.size()));
  for (int64_t group : spec.groups) Put(&out, std::to_string(group));
  return out;
}

bool DecodeKeeperSpec(std::string_view data, KeeperSpec* spec, std::string* error) {
  size_t at = 0;
  std::string_view tag, exe, working_dir;
  if (!Take(data, &at, &tag) || tag != kSpecTag) {
    *error = "not a keeper spec (version tag missing)";
    return false;
  }
  if (!Take(data, &at, &exe) || exe.empty() || !Take(data, &at, &working_dir)) {
    *error = "keeper spec: no program";
    return false;
  }
  spec->exe = exe;
  spec->working_dir = working_dir;
  if (!TakeList(data, &at, &spec->argv) || spec->argv.empty()) {
    *error = "keeper spec: malformed argv";
    return false;
  }
  if (!TakeList(data, &at, &spec->env)) {
    *error = "keeper spec: malformed environment";
    return false;
  }
  size_t cpus = 0, mem_node = 0;
  if (!TakeCount(data, &at, &cpus) || cpus > data.size()) {
    *error = "keeper spec: malformed core binding";
    return false;
  }
  spec->cpus.clear();
  for (size_t i = 0; i < cpus; ++i) {
    size_t cpu = 0;
    if (!TakeCount(data, &at, &cpu) || cpu > 1u << 16) {
      *error = "keeper spec: malformed core binding";
      return false;
    }
    spec->cpus.push_back(static_cast<int>(cpu));
  }
  if (!TakeCount(data, &at, &mem_node) || mem_node > 1u << 16) {
    *error = "keeper spec: malformed memory binding";
    return false;
  }
  spec->mem_node = static_cast<int>(mem_node) - 1;
  // Note [Ranks as another user]: ids travel plus one (-1 as 0); 2^32 - 1 is
  // no id (setuid's "unchanged").
  constexpr size_t kIdLimit = size_t{1} << 32;
  size_t uid = 0, gid = 0, groups = 0;
  if (!TakeCount(data, &at, &uid) || uid >= kIdLimit || !TakeCount(data, &at, &gid) || gid >= kIdLimit ||
      !TakeCount(data, &at, &groups) || groups > 65536) {
    *error = "keeper spec: malformed user";
    return false;
  }
  spec->uid = static_cast<int64_t>(uid) - 1;
  spec->gid = static_cast<int64_t>(gid) - 1;
  spec->groups.clear();
  for (size_t i = 0; i < groups; ++i) {
    size_t group = 0;
    if (!TakeCount(data, &at, &group) || group >= kIdLimit - 1) {
      *error = "keeper spec: malformed user";
      return false;
    }
    spec->groups.push_back(static_cast<int64_t>(group));
  }
  if ((spec->uid < 0) != (spec->gid < 0)) {
    *error = "keeper spec: a uid without a gid, or a gid without a uid";
    return false;
  }
  if (at != data.size()) {
    *error = "keeper spec: bytes after the binding";
    return false;
  }
  return true;
}

std::string KeeperStartedLine(pid_t rank_pid) {
  return std::string(kStarted) + std::to_string(rank_pid) + "\n";
}

std::string KeeperFailedLine(std::string_view why) {
  std::string line(kFailed);
  for (char c : why) line.push_back(c == '\n' ? ' ' : c);
  line.push_back('\n');
  return line;
}

bool ParseKeeperReport(std::string_view line, KeeperReport* report) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.find('\n') != std::string_view::npos) return false;
  if (line.substr(0, kStarted.size()) == kStarted) {
    std::string_view number = line.substr(kStarted.size());
    long long pid = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), pid);
    if (ec != std::errc() || end != number.data() + number.size() || pid <= 0) return false;
    *report = KeeperReport{true, static_cast<pid_t>(pid), ""};
    return true;
  }
  if (line.substr(0, kFailed.size()) == kFailed) {
    *report = KeeperReport{false, 0, std::string(line.substr(kFailed.size()))};
    return true;
  }
  return false;
}

}  // namespace dslaunch
