// libFuzzer target: the rendezvous store's request handlers
// (launcher/rendezvous_store.h) driven by a sequence of calls decoded from
// the input: Set, Get, Add, CompareSet, Delete, Wait (timeout 0) and the
// controller's DropAttempt, each with a job id, an attempt (negative ones
// included), a key and a token chosen by the input (the job's, an attempt's,
// a wrong one, none). Every reply is checked against a model of the store:
// which token opens which attempt (Note [Store token per attempt]), an over
// attempt, an empty key, a counter that is not a number or would overflow,
// and the values each key holds. A difference is a finding (__builtin_trap).
#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/test/server_context_test_spouse.h>

#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "launcher/rendezvous_store.h"

namespace {

using dslaunch::RendezvousStore;

constexpr char kJob[] = "fuzzjob";
constexpr char kJobToken[] = "5f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100";

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Model {
  std::map<std::pair<int, std::string>, std::string> values;
  int dropped_below = 0;
  std::map<int, std::string> attempt_tokens;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  RendezvousStore store(kJob, kJobToken);
  Model model;
  for (int attempt = 0; attempt < 3; ++attempt) model.attempt_tokens[attempt] = store.TokenForAttempt(attempt);
  const std::string keys[] = {"a", "b", "comm/world/id", "", "a/b", "0/a", "counter"};

  while (input.remaining_bytes() > 0) {
    const int op = input.ConsumeIntegralInRange(0, 7);
    const int attempt = input.ConsumeIntegralInRange(-2, 3);
    if (op == 7) {  // the controller ends an attempt
      store.DropAttempt(attempt);
      for (auto it = model.values.begin(); it != model.values.end();) {
        it = it->first.first == attempt ? model.values.erase(it) : std::next(it);
      }
      model.dropped_below = std::max(model.dropped_below, attempt + 1);
      continue;
    }
    const bool right_job = input.ConsumeProbability<float>() < 0.9f;
    const int token_choice = input.ConsumeIntegralInRange(0, 5);
    std::string token;
    if (token_choice == 0) token = kJobToken;
    if (token_choice >= 1 && token_choice <= 3) token = model.attempt_tokens[token_choice - 1];
    if (token_choice == 4) token = "0123456789abcdef0123456789abcdef";
    const std::string key = input.ConsumeBool() ? keys[input.ConsumeIntegralInRange<size_t>(0, 6)]
                                                : input.ConsumeRandomLengthString(24);
    const std::string value = input.ConsumeBool() ? std::to_string(input.ConsumeIntegral<int64_t>())
                                                  : input.ConsumeRandomLengthString(16);

    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    if (!token.empty()) spouse.AddClientMetadata(dslaunch::kTokenMetadataKey, token);
    dslaunch::StoreScope scope;
    scope.set_job_id(right_job ? kJob : "otherjob");
    scope.set_attempt(attempt);

    // What the model expects before the operation's own logic.
    grpc::StatusCode expected = grpc::StatusCode::OK;
    if (!right_job) {
      expected = grpc::StatusCode::PERMISSION_DENIED;
    } else if (attempt < model.dropped_below) {
      expected = grpc::StatusCode::ABORTED;
    } else if (token != kJobToken &&
               !(model.attempt_tokens.count(attempt) && model.attempt_tokens[attempt] == token)) {
      expected = grpc::StatusCode::PERMISSION_DENIED;
    }
    const bool opens = expected == grpc::StatusCode::OK;
    const auto slot = std::make_pair(attempt, key);
    auto held = model.values.find(slot);
    grpc::Status status;
    switch (op) {
      case 0: {
        dslaunch::StoreSetRequest request;
        *request.mutable_scope() = scope;
        request.set_key(key);
        request.set_value(value);
        dslaunch::StoreSetReply reply;
        status = store.Set(&context, &request, &reply);
        if (opens && key.empty()) expected = grpc::StatusCode::INVALID_ARGUMENT;
        if (expected == grpc::StatusCode::OK) model.values[slot] = value;
        break;
      }
      case 1: {
        dslaunch::StoreGetRequest request;
        *request.mutable_scope() = scope;
        request.set_key(key);
        dslaunch::StoreGetReply reply;
        status = store.Get(&context, &request, &reply);
        if (opens && key.empty()) expected = grpc::StatusCode::INVALID_ARGUMENT;
        if (expected == grpc::StatusCode::OK && status.ok()) {
          Check(reply.found() == (held != model.values.end()));
          if (reply.found()) Check(reply.value() == held->second);
        }
        break;
      }
      case 2: {
        const int64_t delta = input.ConsumeIntegral<int64_t>();
        dslaunch::StoreAddRequest request;
        *request.mutable_scope() = scope;
        request.set_key(key);
        request.set_delta(delta);
        dslaunch::StoreAddReply reply;
        status = store.Add(&context, &request, &reply);
        if (opens && key.empty()) expected = grpc::StatusCode::INVALID_ARGUMENT;
        if (expected == grpc::StatusCode::OK) {
          int64_t current = 0, sum = 0;
          if (held != model.values.end() && !absl::SimpleAtoi(held->second, &current)) {
            expected = grpc::StatusCode::FAILED_PRECONDITION;
          } else if (__builtin_add_overflow(current, delta, &sum)) {
            expected = grpc::StatusCode::OUT_OF_RANGE;
          } else {
            model.values[slot] = absl::StrCat(sum);
            if (status.ok()) Check(reply.value() == sum);
          }
        }
        break;
      }
      case 3: {
        const bool expect_absent = input.ConsumeBool();
        const std::string expected_value =
            held != model.values.end() && input.ConsumeBool() ? held->second : input.ConsumeRandomLengthString(8);
        dslaunch::StoreCompareSetRequest request;
        *request.mutable_scope() = scope;
        request.set_key(key);
        request.set_expected(expected_value);
        request.set_expect_absent(expect_absent);
        request.set_desired(value);
        dslaunch::StoreCompareSetReply reply;
        status = store.CompareSet(&context, &request, &reply);
        if (opens && key.empty()) expected = grpc::StatusCode::INVALID_ARGUMENT;
        if (expected == grpc::StatusCode::OK) {
          const bool matches = held == model.values.end() ? expect_absent
                                                          : (!expect_absent && held->second == expected_value);
          if (matches) model.values[slot] = value;
          if (status.ok()) {
            Check(reply.swapped() == matches);
            auto now = model.values.find(slot);
            Check(reply.value() == (now == model.values.end() ? "" : now->second));
          }
        }
        break;
      }
      case 4: {
        dslaunch::StoreDeleteRequest request;
        *request.mutable_scope() = scope;
        request.set_key(key);
        dslaunch::StoreDeleteReply reply;
        status = store.Delete(&context, &request, &reply);
        if (opens && key.empty()) expected = grpc::StatusCode::INVALID_ARGUMENT;
        if (expected == grpc::StatusCode::OK) {
          if (status.ok()) Check(reply.deleted() == (held != model.values.end()));
          model.values.erase(slot);
        }
        break;
      }
      default: {  // Wait with no time to wait: present keys pass, a missing one is DEADLINE_EXCEEDED
        dslaunch::StoreWaitRequest request;
        *request.mutable_scope() = scope;
        request.add_keys(key);
        if (op == 6) request.add_keys(keys[0]);
        request.set_timeout_ms(0);
        std::promise<grpc::Status> waited;
        store.StartWait(context, request,
                        [&waited](grpc::Status s, std::vector<std::string>) { waited.set_value(std::move(s)); });
        status = waited.get_future().get();
        if (opens) {
          bool empty = key.empty(), present = model.values.count(slot) > 0;
          if (op == 6) present = present && model.values.count({attempt, keys[0]}) > 0;
          expected = empty ? grpc::StatusCode::INVALID_ARGUMENT
                           : present ? grpc::StatusCode::OK : grpc::StatusCode::DEADLINE_EXCEEDED;
        }
        break;
      }
    }
    Check(status.error_code() == expected);
  }
  if (store.WaitingCalls() != 0) __builtin_trap();  // every Wait returned and unregistered
  return 0;
}
