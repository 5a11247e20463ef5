#include "runtime/comm/store_adapter.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

[[noreturn]] void Throw(const absl::Status& status, const std::string& what) {
  TORCH_CHECK(false, "rendezvous store ", what, ": ", std::string(status.message()));
}

std::string ToString(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::vector<uint8_t> ToBytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

StoreAdapter::StoreAdapter(StoreClient& store, std::string prefix)
    : store_(store), prefix_(std::move(prefix)) {}

void StoreAdapter::set(const std::string& key, const std::vector<uint8_t>& value) {
  absl::Status status = store_.Set(Key(key), ToString(value));
  if (!status.ok()) Throw(status, absl::StrCat("set ", key));
}

std::vector<uint8_t> StoreAdapter::compareSet(const std::string& key,
                                              const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  std::optional<std::string> expect;
  if (!expected.empty()) expect = ToString(expected);
  auto result = store_.CompareSet(Key(key), expect, ToString(desired));
  if (!result.ok()) Throw(result.status(), absl::StrCat("compareSet ", key));
  return ToBytes(result->value);
}

std::vector<uint8_t> StoreAdapter::get(const std::string& key) {
  // c10d's get waits for the key.
  auto value = store_.WaitGet(Key(key), std::chrono::duration_cast<std::chrono::milliseconds>(timeout_));
  if (!value.ok()) Throw(value.status(), absl::StrCat("get ", key));
  return ToBytes(*value);
}

int64_t StoreAdapter::add(const std::string& key, int64_t value) {
  auto result = store_.Add(Key(key), value);
  if (!result.ok()) Throw(result.status(), absl::StrCat("add ", key));
  return *result;
}

bool StoreAdapter::deleteKey(const std::string& key) {
  auto result = store_.Delete(Key(key));
  if (!result.ok()) Throw(result.status(), absl::StrCat("delete ", key));
  return *result;
}

bool StoreAdapter::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    auto value = store_.Get(Key(key));
    if (!value.ok()) Throw(value.status(), absl::StrCat("check ", key));
    if (!value->has_value()) return false;
  }
  return true;
}

c10::intrusive_ptr<c10d::Store> StoreAdapter::CloneStore() {
  return c10::make_intrusive<StoreAdapter>(store_, prefix_);
}

int64_t StoreAdapter::getNumKeys() {
  TORCH_CHECK(false, "rendezvous store: getNumKeys is not supported");
}

void StoreAdapter::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(timeout_));
}

void StoreAdapter::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  for (const auto& key : keys) full.push_back(Key(key));
  absl::Status status = store_.Wait(full, timeout);
  if (!status.ok()) Throw(status, "wait");
}

}  // namespace dslaunch::runtime
