// libFuzzer target: --include / --exclude / --num_nodes / --num_gpus over a
// hostfile (launcher/resource_selection.h). The input is a hostfile, a NUL,
// and a selector; its first byte picks the flag and the counts. Every input
// either selects slots that exist (each host of the hostfile at most once, in
// its order, slots ascending and in range, at least one) or is an error
// naming the flag; nothing else.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "launcher/hostfile.h"
#include "launcher/resource_selection.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = rest.find('\0');
  if (split == std::string_view::npos) return 0;
  auto hostfile = dslaunch::ParseHostfile(rest.substr(0, split), "fuzz-hostfile");
  if (!hostfile.ok()) return 0;
  const std::string selector(rest.substr(split + 1));
  dslaunch::ResourceRequest request;
  const char* flag = nullptr;
  switch (mode % 4) {
    case 0:
      request.include = selector;
      flag = "--include";
      break;
    case 1:
      request.exclude = selector;
      flag = "--exclude";
      break;
    default:  // counts from the mode byte, the selector ignored: -1 (every one), 0 (refused) or 1..
      request.num_nodes = (mode >> 2) % 5 - 1;
      request.num_gpus = (mode >> 4) % 9 - 1;
      flag = "--num_";
      break;
  }
  auto selected = dslaunch::SelectResources(*hostfile, request);
  if (!selected.ok()) {
    if (selected.status().message().find(flag) == std::string_view::npos &&
        selected.status().message().find("fuzz-hostfile") == std::string_view::npos) {
      __builtin_trap();  // an error that names neither the flag nor the file
    }
    return 0;
  }
  if (selected->empty()) __builtin_trap();
  size_t next_host = 0;
  std::set<std::string> seen;
  for (const dslaunch::HostSlots& host : *selected) {
    // In hostfile order, each host once.
    while (next_host < hostfile->hosts.size() && hostfile->hosts[next_host].host != host.host) ++next_host;
    if (next_host == hostfile->hosts.size() || !seen.insert(host.host).second) __builtin_trap();
    const int slots = hostfile->hosts[next_host].slots;
    if (host.slots.empty()) __builtin_trap();
    for (size_t i = 0; i < host.slots.size(); ++i) {
      if (host.slots[i] < 0 || host.slots[i] >= slots || (i > 0 && host.slots[i] <= host.slots[i - 1])) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
