// c10d::Store over the control plane's rendezvous store, so c10d process
// groups (Gloo) rendezvous through the same mechanism as everything else
// (ARCHITECTURE.md: "One mechanism; no second TCP store"). Keys are prefixed
// with the group's name. c10d expects exceptions; this throws c10::Error with
// the store's message.
#pragma once

#include <string>

#include "common/store_client.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

class StoreAdapter final : public compat::StoreBase {
 public:
  StoreAdapter(StoreClient& store, std::string prefix);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // A second adapter over the same client and prefix.
  c10::intrusive_ptr<c10d::Store> CloneStore() override;

 private:
  std::string Key(const std::string& key) const { return prefix_ + key; }

  StoreClient& store_;
  const std::string prefix_;
};

}  // namespace dslaunch::runtime
