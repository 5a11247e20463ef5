#include "launcher/resource_selection.h"

#include <map>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace dslaunch {
namespace {

// host -> the slots named for it; nullopt when the host was named without
// slots, which means every slot (DeepSpeed #6671 failed on that form).
using HostSlotList = std::map<std::string, std::optional<std::set<int>>, std::less<>>;

const HostfileEntry* FindHost(const Hostfile& hostfile, absl::string_view host) {
  for (const HostfileEntry& entry : hostfile.hosts) {
    if (entry.host == host) return &entry;
  }
  return nullptr;
}

std::string SlotRange(int slots) {
  return slots == 1 ? "slot 0" : absl::StrCat("slots 0-", slots - 1);
}

// A slot number: digits only, small enough for an int.
bool ParseSlot(absl::string_view text, int* slot) {
  if (text.empty() || text.size() > 9) return false;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *slot = value;
  return true;
}

// Parses `host[:slot[,slot...]][@host[:slot...]...]` for `flag` and checks every
// host and slot against the hostfile, so that a typo is an error rather than a
// silently smaller job.
absl::StatusOr<HostSlotList> ParseHostSlotList(absl::string_view flag, const std::string& text,
                                               const Hostfile& hostfile) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", text, "': ", what));
  };
  HostSlotList result;
  for (absl::string_view segment : absl::StrSplit(text, '@')) {
    if (segment.empty()) return error("empty segment between '@'");
    absl::string_view host = segment;
    std::optional<absl::string_view> slot_text;
    if (size_t colon = segment.find(':'); colon != absl::string_view::npos) {
      host = segment.substr(0, colon);
      slot_text = segment.substr(colon + 1);
    }
    if (host.empty()) return error(absl::StrCat("empty host name in '", segment, "'"));
    const HostfileEntry* entry = FindHost(hostfile, host);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat(flag, " '", text, "': host '", host,
                                              "' is not in hostfile ", hostfile.path));
    }
    std::optional<std::set<int>>& slots =
        result.try_emplace(std::string(host), std::set<int>()).first->second;
    if (!slot_text.has_value()) {
      slots.reset();  // every slot, whatever other segments named
      continue;
    }
    if (slot_text->empty()) {
      return error(absl::StrCat("no slot after ':' in '", segment, "'"));
    }
    for (absl::string_view item : absl::StrSplit(*slot_text, ',')) {
      int slot = 0;
      if (!ParseSlot(item, &slot)) {
        return error(absl::StrCat("slot '", item, "' of '", host,
                                  "' is not a non-negative integer"));
      }
      if (slot >= entry->slots) {
        return error(absl::StrCat("slot ", slot, " of '", host, "' does not exist (it has ",
                                  SlotRange(entry->slots), ")"));
      }
      if (slots.has_value()) slots->insert(slot);
    }
  }
  return result;
}

std::vector<int> AllSlots(int count) {
  std::vector<int> slots(count);
  for (int i = 0; i < count; ++i) slots[i] = i;
  return slots;
}

}  // namespace

absl::StatusOr<std::vector<HostSlots>> SelectResources(const Hostfile& hostfile,
                                                       const ResourceRequest& request) {
  const bool has_include = !request.include.empty();
  const bool has_exclude = !request.exclude.empty();
  const bool has_counts = request.num_nodes != -1 || request.num_gpus != -1;
  if (has_include && has_exclude) {
    return absl::InvalidArgumentError(
        absl::StrCat("--include '", request.include, "' and --exclude '", request.exclude,
                     "' cannot be used together"));
  }
  // As in DeepSpeed: a list of hosts and slots already says how many.
  if ((has_include || has_exclude) && has_counts) {
    absl::string_view flag = has_include ? "--include" : "--exclude";
    const std::string& text = has_include ? request.include : request.exclude;
    absl::string_view count_flag = request.num_nodes != -1 ? "--num_nodes" : "--num_gpus";
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", text, "' cannot be used with ", count_flag));
  }

  std::vector<HostSlots> selected;
  for (const HostfileEntry& entry : hostfile.hosts) {
    selected.push_back(HostSlots{entry.host, AllSlots(entry.slots)});
  }

  if (request.num_nodes != -1) {
    const int available = static_cast<int>(hostfile.hosts.size());
    if (request.num_nodes < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num_nodes ", request.num_nodes, ": must be at least 1"));
    }
    if (request.num_nodes > available) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num_nodes ", request.num_nodes, ": hostfile ", hostfile.path,
                       " has only ", available, available == 1 ? " host" : " hosts"));
    }
    selected.resize(request.num_nodes);
  }

  if (request.num_gpus != -1) {
    if (request.num_gpus < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num_gpus ", request.num_gpus, ": must be at least 1"));
    }
    for (size_t i = 0; i < selected.size(); ++i) {
      const HostfileEntry& entry = hostfile.hosts[i];  // selected is a prefix of the hostfile
      if (entry.slots < request.num_gpus) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--num_gpus ", request.num_gpus, ": host '", entry.host, "' has only ", entry.slots,
            entry.slots == 1 ? " slot" : " slots", " (", hostfile.path, ":", entry.line, ")"));
      }
      selected[i].slots = AllSlots(request.num_gpus);
    }
  }

  absl::string_view flag;  // the flag that made the selection, for the empty-selection error
  std::string flag_text;
  if (has_include || has_exclude) {
    flag = has_include ? "--include" : "--exclude";
    flag_text = has_include ? request.include : request.exclude;
    auto listed = ParseHostSlotList(flag, flag_text, hostfile);
    if (!listed.ok()) return listed.status();
    std::vector<HostSlots> kept;
    for (HostSlots& host : selected) {
      auto it = listed->find(host.host);
      const bool named = it != listed->end();
      if (has_include) {
        if (!named) continue;
        if (it->second.has_value()) host.slots.assign(it->second->begin(), it->second->end());
      } else if (named) {
        if (!it->second.has_value()) continue;  // the whole host is excluded
        std::erase_if(host.slots, [&](int slot) { return it->second->contains(slot); });
        if (host.slots.empty()) continue;
      }
      kept.push_back(std::move(host));
    }
    selected = std::move(kept);
  }

  if (selected.empty()) {
    if (flag.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("hostfile ", hostfile.path, " has no host"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", flag_text, "': leaves no slot to run on"));
  }
  return selected;
}

}  // namespace dslaunch
