#include "runtime/comm/group_arrival.h"

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

constexpr char kConnected[] = "connected";
constexpr char kFailedPrefix[] = "failed: ";

std::string ArrivalKey(const std::string& prefix, int rank) { return absl::StrCat(prefix, "arrived/", rank); }

}  // namespace

absl::Status RecordGroupArrival(StoreClient& store, const std::string& prefix, int rank, const absl::Status& how) {
  return store.Set(ArrivalKey(prefix, rank), how.ok() ? std::string(kConnected)
                                                      : absl::StrCat(kFailedPrefix, how.message()));
}

absl::Status AwaitGroupArrivals(StoreClient& store, const std::string& prefix, int size,
                                std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int member = 0; member < size; ++member) keys.push_back(ArrivalKey(prefix, member));
  absl::StatusOr<std::vector<std::string>> values = store.WaitValues(keys, timeout);
  if (!values.ok()) return values.status();
  if (values->empty()) {  // a store from before values came with the wait: ask
    for (const std::string& key : keys) {
      absl::StatusOr<std::optional<std::string>> value = store.Get(key);
      if (!value.ok()) return value.status();
      values->push_back(value->value_or(""));
    }
  }
  if (values->size() != keys.size()) {
    return absl::InternalError(absl::StrCat("the store returned ", values->size(), " values for ", keys.size(),
                                            " keys of the group's members"));
  }
  for (int member = 0; member < size; ++member) {
    const std::string& value = (*values)[static_cast<size_t>(member)];
    if (value == kConnected) continue;
    return absl::UnavailableError(absl::StrCat(
        "member ", member, " of the group ",
        absl::StartsWith(value, kFailedPrefix) ? "failed its rendezvous: " + value.substr(sizeof(kFailedPrefix) - 1)
                                               : "recorded '" + value + "' for its rendezvous"));
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
