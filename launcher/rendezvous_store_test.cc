#include "launcher/rendezvous_store.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/generic_unary_call.h"
#include "common/rpc_auth_policy.h"
#include "common/store_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kJob[] = "job-42";
constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
// Bound on any wait for an event that should happen promptly.
constexpr auto kBound = 20s;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

class RendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<RendezvousStore>(kJob, kToken);
    store_->ObserveSets("observed", [this](int attempt, const std::string& value) {
      std::lock_guard<std::mutex> lock(observed_mu_);
      observed_.emplace_back(attempt, value);
    });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    store_->Serve(builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (store_) store_->Shutdown();  // ends waiters so that the server can stop
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 5s);
    server_.reset();
    store_.reset();
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<StoreClient> Client(int attempt = 0, const std::string& token = kToken,
                                      const std::string& job = kJob) {
    return std::make_unique<StoreClient>(Address(), token, job, attempt);
  }

  int port_ = 0;
  std::mutex observed_mu_;
  std::vector<std::pair<int, std::string>> observed_;  // the sets of "observed"
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(RendezvousStoreTest, SetGetAndAbsentGet) {
  auto client = Client();
  auto absent = client->Get("k");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());

  ASSERT_TRUE(client->Set("k", "v1").ok());
  auto got = client->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "v1");

  ASSERT_TRUE(client->Set("k", "v2").ok());
  got = client->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "v2");

  // Binary values survive (the proto field is bytes).
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(client->Set("bin", binary).ok());
  got = client->Get("bin");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, binary);

  // An empty value is a present key.
  ASSERT_TRUE(client->Set("empty", "").ok());
  got = client->Get("empty");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "");
}

// Note [Live job status]: the controller hears of each committed checkpoint
// as the rank writes it, not when the attempt is over.
TEST_F(RendezvousStoreTest, ObserversSeeEverySetOfTheirKeyOnly) {
  ASSERT_TRUE(Client(0)->Set("observed", "global_step2").ok());
  ASSERT_TRUE(Client(0)->Set("other", "x").ok());
  ASSERT_TRUE(Client(1)->Set("observed", "global_step4").ok());
  EXPECT_FALSE(Client(1)->Set("", "refused").ok());
  std::lock_guard<std::mutex> lock(observed_mu_);
  EXPECT_EQ(observed_, (std::vector<std::pair<int, std::string>>{{0, "global_step2"}, {1, "global_step4"}}));
}

TEST_F(RendezvousStoreTest, EmptyKeyIsInvalid) {
  auto client = Client();
  EXPECT_EQ(client->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Get("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RendezvousStoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 50;
  auto shared = Client();
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<absl::Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share a client, half have their own.
      std::unique_ptr<StoreClient> own = t % 2 ? Client() : nullptr;
      StoreClient* client = own ? own.get() : shared.get();
      for (int i = 0; i < kAdds; ++i) {
        auto value = client->Add("counter", 1);
        if (!value.ok()) {
          errors[t] = value.status();
          return;
        }
        seen[t].push_back(*value);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) ASSERT_TRUE(error.ok()) << error;

  // Every returned value is distinct: 1..400 exactly once.
  std::set<int64_t> all;
  for (const auto& values : seen) all.insert(values.begin(), values.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);

  auto stored = shared->Get("counter");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(**stored, "400");
}

TEST_F(RendezvousStoreTest, AddNegativeDeltaAndExistingNumericValue) {
  auto client = Client();
  ASSERT_TRUE(client->Set("n", "10").ok());
  auto value = client->Add("n", -3);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 7);
  value = client->Add("fresh", 0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 0);
  auto stored = client->Get("fresh");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(**stored, "0");
}

TEST_F(RendezvousStoreTest, AddOnANonCounterIsFailedPrecondition) {
  auto client = Client();
  ASSERT_TRUE(client->Set("text", "hello").ok());
  auto value = client->Add("text", 1);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(value.status()), HasSubstr("text"));
  EXPECT_THAT(Message(value.status()), HasSubstr("hello"));
  // The value is unchanged.
  auto stored = client->Get("text");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(**stored, "hello");
}

TEST_F(RendezvousStoreTest, CompareSet) {
  auto client = Client();
  // Absent expected, key absent: swaps.
  auto result = client->CompareSet("k", std::nullopt, "first");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->swapped);
  EXPECT_EQ(result->value, "first");

  // Absent expected, key present: no swap, returns the current value.
  result = client->CompareSet("k", std::nullopt, "second");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->swapped);
  EXPECT_EQ(result->value, "first");

  // Mismatching expected: no swap.
  result = client->CompareSet("k", std::string("nope"), "third");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->swapped);
  EXPECT_EQ(result->value, "first");

  // Matching expected: swaps.
  result = client->CompareSet("k", std::string("first"), "fourth");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->swapped);
  EXPECT_EQ(result->value, "fourth");
  auto stored = client->Get("k");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(**stored, "fourth");

  // An expected value (even "") does not match an absent key.
  result = client->CompareSet("absent", std::string(""), "x");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->swapped);
  stored = client->Get("absent");
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->has_value());
}

TEST_F(RendezvousStoreTest, Delete) {
  auto client = Client();
  ASSERT_TRUE(client->Set("k", "v").ok());
  auto deleted = client->Delete("k");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(*deleted);
  auto got = client->Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  deleted = client->Delete("k");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(*deleted);
}

TEST_F(RendezvousStoreTest, WaitIsSatisfiedBySetsFromAnotherThread) {
  auto waiter = Client();
  auto setter = Client();
  auto waited = std::async(std::launch::async, [&] { return waiter->WaitValues({"b", "a"}, 60s); });
  ASSERT_TRUE(setter->Set("a", "1").ok());
  // Only one of the two keys exists: the wait cannot be over.
  EXPECT_EQ(waited.wait_for(0s), std::future_status::timeout);
  ASSERT_TRUE(setter->Set("b", "2").ok());
  ASSERT_EQ(waited.wait_for(kBound), std::future_status::ready);
  auto values = waited.get();
  ASSERT_TRUE(values.ok()) << values.status();
  // The reply carries the values, in the order the keys were asked for.
  EXPECT_EQ(*values, (std::vector<std::string>{"2", "1"}));
}

TEST_F(RendezvousStoreTest, WaitIsSatisfiedByAdd) {
  auto waiter = Client();
  auto waited = std::async(std::launch::async, [&] { return waiter->WaitGet("count", 60s); });
  ASSERT_TRUE(Client()->Add("count", 5).ok());
  ASSERT_EQ(waited.wait_for(kBound), std::future_status::ready);
  auto value = waited.get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "5");
}

TEST_F(RendezvousStoreTest, WaitOnPresentKeysReturnsAtOnce) {
  auto client = Client();
  ASSERT_TRUE(client->Set("here", "1").ok());
  absl::Status status = client->Wait({"here"}, 0ms);
  EXPECT_TRUE(status.ok()) << status;
  auto values = client->WaitValues({"here"}, 0ms);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, std::vector<std::string>{"1"});
}

TEST_F(RendezvousStoreTest, WaitTimesOutNamingTheMissingKey) {
  auto client = Client();
  ASSERT_TRUE(client->Set("present", "1").ok());
  auto start = std::chrono::steady_clock::now();
  absl::Status status = client->Wait({"present", "missing/key"}, 200ms);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(Message(status), HasSubstr("'missing/key'"));
  EXPECT_THAT(Message(status), HasSubstr("200 ms"));
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, kBound);
}

TEST_F(RendezvousStoreTest, BarrierReleasesAllThreads) {
  constexpr int kWorld = 6;
  std::vector<std::future<absl::Status>> arrivals;
  for (int r = 0; r < kWorld; ++r) {
    arrivals.push_back(std::async(std::launch::async, [&] {
      return Client()->Barrier("start", kWorld, 60s);
    }));
  }
  for (auto& arrival : arrivals) {
    ASSERT_EQ(arrival.wait_for(kBound), std::future_status::ready);
    absl::Status status = arrival.get();
    EXPECT_TRUE(status.ok()) << status;
  }
}

// Before, every write woke every waiting call: a barrier of N ranks cost
// N^2 wake-ups (512 ranks: 4.9 s of the controller's CPU, against 0.9 s now).
TEST_F(RendezvousStoreTest, AWriteWakesOnlyTheWaitersOfItsKey) {
  constexpr int kWorld = 32;
  std::vector<std::future<absl::Status>> ranks;
  for (int r = 0; r < kWorld - 1; ++r) {
    ranks.push_back(std::async(std::launch::async, [&] { return Client()->Barrier("b", kWorld, kBound); }));
  }
  auto waiting = [&] { return store_->WaitingCalls() == static_cast<size_t>(kWorld - 1); };
  for (auto deadline = std::chrono::steady_clock::now() + kBound;
       !waiting() && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(waiting());
  // kWorld - 1 arrivals counted, and not one waiter woken by them.
  EXPECT_EQ(store_->WaitersWoken(), 0);
  ASSERT_TRUE(Client()->Barrier("b", kWorld, kBound).ok());
  for (auto& rank : ranks) {
    ASSERT_EQ(rank.wait_for(kBound), std::future_status::ready);
    EXPECT_TRUE(rank.get().ok());
  }
  // The one write of the barrier's done key woke each waiter once.
  EXPECT_EQ(store_->WaitersWoken(), kWorld - 1);
  EXPECT_EQ(store_->WaitingCalls(), 0u);
}

TEST_F(RendezvousStoreTest, BarrierWithMissingRanksTimesOut) {
  absl::Status status = Client()->Barrier("lonely", 2, 200ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(Message(status), HasSubstr("lonely"));
}

TEST_F(RendezvousStoreTest, OverSubscribedBarrierIsAnError) {
  constexpr int kWorld = 4;
  std::vector<std::future<absl::Status>> arrivals;
  for (int r = 0; r < kWorld + 1; ++r) {
    arrivals.push_back(std::async(std::launch::async, [&] {
      return Client()->Barrier("once", kWorld, 60s);
    }));
  }
  int ok = 0;
  std::vector<absl::Status> failures;
  for (auto& arrival : arrivals) {
    ASSERT_EQ(arrival.wait_for(kBound), std::future_status::ready);
    absl::Status status = arrival.get();
    if (status.ok()) {
      ++ok;
    } else {
      failures.push_back(status);
    }
  }
  EXPECT_EQ(ok, kWorld);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].code(), absl::StatusCode::kFailedPrecondition) << failures[0];
  EXPECT_THAT(Message(failures[0]), HasSubstr("once"));
  EXPECT_THAT(Message(failures[0]), HasSubstr("single-use"));
}

TEST_F(RendezvousStoreTest, BarrierNamesArePerAttempt) {
  // The same name in a new attempt is a new barrier.
  for (int attempt : {0, 1}) {
    SCOPED_TRACE(attempt);
    auto first = std::async(std::launch::async,
                            [&] { return Client(attempt)->Barrier("sync", 2, 60s); });
    absl::Status second = Client(attempt)->Barrier("sync", 2, 60s);
    EXPECT_TRUE(second.ok()) << second;
    ASSERT_EQ(first.wait_for(kBound), std::future_status::ready);
    absl::Status status = first.get();
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST_F(RendezvousStoreTest, WrongTokenIsUnauthenticated) {
  ASSERT_TRUE(Client()->Set("secret", "s").ok());
  for (const std::string token : {"wrong-token-wrong-token-wrong-tok", "", "0123456789abcdef"}) {
    SCOPED_TRACE(token);
    auto intruder = Client(0, token);
    EXPECT_EQ(intruder->Set("k", "v").code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(intruder->Get("secret").status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(intruder->Add("c", 1).status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(intruder->Delete("secret").status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(intruder->CompareSet("secret", std::nullopt, "x").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(intruder->Wait({"secret"}, 1s).code(), absl::StatusCode::kUnauthenticated);
  }
  // Nothing was changed.
  auto got = Client()->Get("secret");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "s");
  auto k = Client()->Get("k");
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(k->has_value());
}

// Note [One authentication gate]: every method of the store's table refuses a
// call without the store token before it runs; an unlisted method is refused by name.
TEST_F(RendezvousStoreTest, EveryListedMethodRefusesAMissingOrWrongTokenAndUnlistedOnesAreRefused) {
  auto channel = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  for (const auto& [method, credential] : StoreAuthPolicy().methods) {
    for (const std::string token : {"", "wrong-token-wrong-token-wrong-tok"}) {
      grpc::Status status = GenericUnaryCall(channel, method, token);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
      EXPECT_EQ(status.error_message(), "rendezvous store: missing or wrong DSLAUNCH_STORE_TOKEN") << method;
    }
  }
  for (const std::string method : {"/dslaunch.Store/Scan", "/dslaunch.Agent/StartRanks"}) {
    grpc::Status status = GenericUnaryCall(channel, method, kToken);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_EQ(status.error_message(),
              "rendezvous store: method " + method + " is not in the authentication table; refused");
  }
}

// Every call must carry the token, including a Wait for no key at all.
TEST_F(RendezvousStoreTest, WaitForNoKeysStillChecksTokenAndJob) {
  EXPECT_EQ(Client(0, "wrong-token-wrong-token-wrong-tok")->Wait({}, 1s).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client(0, kToken, "other-job")->Wait({}, 1s).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(RendezvousStoreTest, WrongJobIsPermissionDenied) {
  ASSERT_TRUE(Client()->Set("k", "v").ok());
  auto other = Client(0, kToken, "other-job");
  absl::Status status = other->Set("k", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(Message(status), HasSubstr("other-job"));
  EXPECT_THAT(Message(status), HasSubstr(kJob));
  EXPECT_EQ(other->Get("k").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other->Wait({"k"}, 1s).code(), absl::StatusCode::kPermissionDenied);
  auto got = Client()->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "v");
}

// Note [Store token per attempt]: a rank's token opens its own attempt only:
// not a later one (started or not), not an earlier one.
TEST_F(RendezvousStoreTest, AnAttemptsTokenOpensThatAttemptOnly) {
  const std::string token1 = store_->TokenForAttempt(1);
  EXPECT_EQ(store_->TokenForAttempt(1), token1);  // made once
  const std::string token2 = store_->TokenForAttempt(2);
  EXPECT_NE(token1, token2);
  EXPECT_NE(token1, kToken);
  auto own = Client(1, token1);
  ASSERT_TRUE(own->Set("k", "from-1").ok());
  auto got = own->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ(**got, "from-1");
  for (int other : {2, 3, 0}) {  // started, not started, earlier
    SCOPED_TRACE(other);
    auto trespasser = Client(other, token1);
    const absl::Status set = trespasser->Set("k", "poison");
    EXPECT_EQ(set.code(), absl::StatusCode::kPermissionDenied) << set;
    EXPECT_THAT(Message(set), HasSubstr("does not open attempt " + std::to_string(other)));
    EXPECT_EQ(trespasser->Get("k").status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(trespasser->Wait({"k"}, 1s).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_THAT(Message(Client(3, token1)->Set("k", "x")), HasSubstr("(not started)"));
  // Attempt 2's own token does, and finds nothing attempt 1's token wrote there.
  auto second = Client(2, token2)->Get("k");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->has_value());
  // The job's token opens every live attempt (the controller's side).
  EXPECT_TRUE(Client(3)->Set("k", "controller").ok());
}

TEST_F(RendezvousStoreTest, AttemptsAreIsolated) {
  auto first = Client(0);
  auto second = Client(1);
  ASSERT_TRUE(first->Set("k", "from-0").ok());
  auto got = second->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());

  ASSERT_TRUE(second->Set("k", "from-1").ok());
  got = first->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "from-0");
  got = second->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "from-1");

  auto count = second->Add("n", 1);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 1);
  count = first->Add("n", 1);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 1);

  absl::Status waited = second->Wait({"only-in-0"}, 100ms);
  ASSERT_TRUE(first->Set("only-in-0", "x").ok());
  EXPECT_EQ(second->Wait({"only-in-0"}, 100ms).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousStoreTest, DropAttemptWakesItsWaitersWithAborted) {
  auto attempt0 = Client(0);
  auto attempt1 = Client(1);
  ASSERT_TRUE(attempt0->Set("old", "0").ok());
  ASSERT_TRUE(attempt1->Set("new", "1").ok());
  auto waited = std::async(std::launch::async, [&] { return attempt0->Wait({"never"}, 60s); });
  store_->DropAttempt(0);
  ASSERT_EQ(waited.wait_for(kBound), std::future_status::ready);
  absl::Status status = waited.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_THAT(Message(status), HasSubstr("attempt 0"));

  // Attempt 0 is over: its leftovers can neither read nor write; attempt 1's
  // keys are kept.
  auto got = attempt0->Get("old");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(attempt0->Set("old", "again").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(attempt0->Add("n", 1).status().code(), absl::StatusCode::kAborted);
  got = attempt1->Get("new");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "1");
  // Attempt 1 still waits normally.
  auto later = std::async(std::launch::async, [&] { return attempt1->WaitGet("later", 60s); });
  ASSERT_TRUE(attempt1->Set("later", "L").ok());
  ASSERT_EQ(later.wait_for(kBound), std::future_status::ready);
  auto value = later.get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "L");
}

TEST_F(RendezvousStoreTest, DropAttemptOneKeepsAttemptTen) {
  ASSERT_TRUE(Client(1)->Set("k", "1").ok());
  ASSERT_TRUE(Client(10)->Set("k", "10").ok());
  ASSERT_TRUE(Client(11)->Set("k", "11").ok());
  store_->DropAttempt(1);
  auto got = Client(1)->Get("k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);
  got = Client(10)->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "10");
  got = Client(11)->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "11");
}

TEST_F(RendezvousStoreTest, CounterOverflowIsRefused) {
  auto client = Client();
  ASSERT_TRUE(client->Add("big", std::numeric_limits<int64_t>::max()).ok());
  auto overflow = client->Add("big", 1);
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kOutOfRange) << overflow.status();
  auto value = client->Get("big");
  ASSERT_TRUE(value.ok() && value->has_value());
  EXPECT_EQ(**value, std::to_string(std::numeric_limits<int64_t>::max()));
}

TEST_F(RendezvousStoreTest, ShutdownEndsWaitersWithAborted) {
  auto client = Client();
  auto waited = std::async(std::launch::async, [&] { return client->Wait({"never"}, 60s); });
  store_->Shutdown();
  ASSERT_EQ(waited.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(waited.get().code(), absl::StatusCode::kAborted);
}

// ---------------------------------------------------------------------------
// StoreClient::FromEnvironment

// Saves the rank-environment variables and restores them on destruction.
class ScopedRankEnvironment {
 public:
  static constexpr const char* kNames[] = {"DSLAUNCH_STORE_ADDR", "DSLAUNCH_STORE_TOKEN",
                                           "DSLAUNCH_JOB_ID", "DSLAUNCH_ATTEMPT"};
  ScopedRankEnvironment() {
    for (const char* name : kNames) {
      const char* value = ::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~ScopedRankEnvironment() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) {
        ::setenv(kNames[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(kNames[i]);
      }
    }
  }

 private:
  std::vector<std::optional<std::string>> saved_;
};

TEST_F(RendezvousStoreTest, FromEnvironmentNamesTheMissingVariable) {
  ScopedRankEnvironment scoped;
  const std::string values[] = {Address(), kToken, kJob, "0"};
  for (int set = 0; set < 4; ++set) {
    // Variables 0..set-1 are set; variable `set` is missing.
    SCOPED_TRACE(ScopedRankEnvironment::kNames[set]);
    auto client = StoreClient::FromEnvironment();
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(Message(client.status()), HasSubstr(ScopedRankEnvironment::kNames[set]));
    // An empty value counts as missing too.
    ::setenv(ScopedRankEnvironment::kNames[set], "", 1);
    client = StoreClient::FromEnvironment();
    ASSERT_FALSE(client.ok());
    EXPECT_THAT(Message(client.status()), HasSubstr(ScopedRankEnvironment::kNames[set]));
    ::setenv(ScopedRankEnvironment::kNames[set], values[set].c_str(), 1);
  }
  auto client = StoreClient::FromEnvironment();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->job_id(), kJob);
  EXPECT_EQ((*client)->attempt(), 0);
  ASSERT_TRUE((*client)->Set("via-env", "yes").ok());
  auto got = Client()->Get("via-env");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "yes");
}

TEST_F(RendezvousStoreTest, FromEnvironmentRejectsABadAttempt) {
  ScopedRankEnvironment scoped;
  ::setenv("DSLAUNCH_STORE_ADDR", Address().c_str(), 1);
  ::setenv("DSLAUNCH_STORE_TOKEN", kToken, 1);
  ::setenv("DSLAUNCH_JOB_ID", kJob, 1);
  for (const char* bad : {"x", "-1", "1.5"}) {
    SCOPED_TRACE(bad);
    ::setenv("DSLAUNCH_ATTEMPT", bad, 1);
    auto client = StoreClient::FromEnvironment();
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(client.status()), HasSubstr("DSLAUNCH_ATTEMPT"));
    EXPECT_THAT(Message(client.status()), HasSubstr(std::string("'") + bad + "'"));
  }
  ::setenv("DSLAUNCH_ATTEMPT", "3", 1);
  auto client = StoreClient::FromEnvironment();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->attempt(), 3);
}

}  // namespace
}  // namespace dslaunch

namespace dslaunch {
namespace {

// Note [Waiting without a thread]: a caller that gives up (its process died,
// its own deadline passed) takes its waiter with it; nothing waits on.
TEST_F(RendezvousStoreTest, AWaitItsCallerAbandonsLeavesNoWaiter) {
  auto stub = Store::NewStub(grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  AttachToken(&context, kToken);
  context.set_deadline(std::chrono::system_clock::now() + 300ms);
  StoreWaitRequest request;
  request.mutable_scope()->set_job_id(kJob);
  request.mutable_scope()->set_attempt(0);
  request.add_keys("never-written");
  request.set_timeout_ms(600000);
  StoreWaitReply reply;
  EXPECT_EQ(stub->Wait(&context, request, &reply).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  for (auto deadline = std::chrono::steady_clock::now() + kBound;
       store_->WaitingCalls() != 0 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::yield();
  }
  EXPECT_EQ(store_->WaitingCalls(), 0u);
}

// Thousands of ranks wait at once without a thread each: 2,000 waiting calls
// over one connection, ended by one write.
TEST_F(RendezvousStoreTest, TwoThousandWaitersNeedNoThreadEach) {
  constexpr int kWaiters = 2000;
  auto stub = Store::NewStub(grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials()));
  struct Call {
    grpc::ClientContext context;
    StoreWaitRequest request;
    StoreWaitReply reply;
    std::promise<grpc::Status> done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kWaiters; ++i) {
    auto call = std::make_unique<Call>();
    AttachToken(&call->context, kToken);
    call->context.set_deadline(std::chrono::system_clock::now() + kBound);
    call->request.mutable_scope()->set_job_id(kJob);
    call->request.add_keys("go");
    call->request.set_timeout_ms(std::chrono::milliseconds(kBound).count());
    Call* raw = call.get();
    stub->async()->Wait(&raw->context, &raw->request, &raw->reply,
                        [raw](grpc::Status status) { raw->done.set_value(std::move(status)); });
    calls.push_back(std::move(call));
  }
  for (auto deadline = std::chrono::steady_clock::now() + kBound;
       store_->WaitingCalls() != kWaiters && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::yield();
  }
  ASSERT_EQ(store_->WaitingCalls(), static_cast<size_t>(kWaiters));
  // A thread per waiting call (the sync API) would make this over 2,000.
  const auto threads = std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                     std::filesystem::directory_iterator());
  EXPECT_LT(threads, 200);
  ASSERT_TRUE(Client()->Set("go", "1").ok());
  for (auto& call : calls) {
    auto result = call->done.get_future();
    ASSERT_EQ(result.wait_for(kBound), std::future_status::ready);
    EXPECT_TRUE(result.get().ok());
  }
  EXPECT_EQ(store_->WaitingCalls(), 0u);
}

}  // namespace
}  // namespace dslaunch

namespace dslaunch {
namespace {

// A store served on a port of its own, `prepare`d before it serves.
struct ServedStore {
  explicit ServedStore(const std::function<void(RendezvousStore&)>& prepare) {
    store = std::make_unique<RendezvousStore>(kJob, kToken);
    prepare(*store);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    store->Serve(builder);
    server = builder.BuildAndStart();
  }
  ~ServedStore() {
    store->Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 5s);
  }
  StoreClient Client(int attempt, const std::string& token) {
    return StoreClient("127.0.0.1:" + std::to_string(port), token, kJob, attempt);
  }
  int port = 0;
  std::unique_ptr<RendezvousStore> store;
  std::unique_ptr<grpc::Server> server;
};

// Note [Controller failover]: the changes a store records rebuild, in a new
// store, what the ranks wrote into the old one; the attempts' tokens still
// open their own namespaces only.
TEST(RendezvousStoreFailoverTest, RecordedChangesRestoreTheStoreInANewOne) {
  std::mutex mu;
  std::vector<StoreChange> changes;
  ServedStore old_store([&](RendezvousStore& store) {
    store.RecordChanges([&](const StoreChange& change) {
      std::lock_guard<std::mutex> lock(mu);
      changes.push_back(change);
    });
  });
  const std::string token0 = old_store.store->TokenForAttempt(0);
  StoreClient attempt0 = old_store.Client(0, token0);
  ASSERT_TRUE(attempt0.Set("gone", "with attempt 0").ok());
  old_store.store->DropAttempt(0);
  const std::string token1 = old_store.store->TokenForAttempt(1);
  StoreClient attempt1 = old_store.Client(1, token1);
  ASSERT_TRUE(attempt1.Set("nccl/world", "unique id").ok());
  ASSERT_TRUE(attempt1.Add("counter", 2).ok());
  ASSERT_TRUE(attempt1.Add("counter", 3).ok());
  ASSERT_TRUE(attempt1.Set("temporary", "x").ok());
  ASSERT_TRUE(attempt1.Delete("temporary").ok());
  ASSERT_TRUE(attempt1.CompareSet("checkpoint/committed", std::nullopt, "global_step8").ok());

  std::vector<std::pair<int, std::string>> observed;
  ServedStore new_store([&](RendezvousStore& store) {
    store.ObserveSets("checkpoint/committed",
                      [&](int attempt, const std::string& tag) { observed.emplace_back(attempt, tag); });
    std::lock_guard<std::mutex> lock(mu);
    store.Restore(changes);
  });
  StoreClient resumed = new_store.Client(1, token1);
  EXPECT_EQ(*resumed.Get("nccl/world"), std::optional<std::string>("unique id"));
  EXPECT_EQ(*resumed.Get("counter"), std::optional<std::string>("5"));
  EXPECT_EQ(*resumed.Get("temporary"), std::nullopt);
  EXPECT_EQ(*resumed.Get("checkpoint/committed"), std::optional<std::string>("global_step8"));
  EXPECT_EQ(observed, (std::vector<std::pair<int, std::string>>{{1, "global_step8"}}));
  EXPECT_EQ(new_store.store->TokenForAttempt(1), token1);
  // Attempt 0 is over in the new store too, and attempt 1's token opens only attempt 1.
  EXPECT_FALSE(new_store.Client(0, token0).Get("gone").ok());
  EXPECT_FALSE(new_store.Client(2, token1).Get("nccl/world").ok());
}

}  // namespace
}  // namespace dslaunch
