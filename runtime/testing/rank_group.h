// Test support: an in-process rendezvous store and a group of ranks on
// threads, each with its own Gloo communicator; plus the small GPT, batches
// and parameter comparisons the engine tests share.
#pragma once

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "common/store_client.h"
#include "gtest/gtest.h"
#include "launcher/rendezvous_store.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime::testing {

// A RendezvousStore served on loopback for the lifetime of the object.
class InProcessStore {
 public:
  static constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
  explicit InProcessStore(std::string job = "test-job")
      : job_(std::move(job)), store_(job_, kToken) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    store_.Serve(builder);
    server_ = builder.BuildAndStart();
  }
  ~InProcessStore() {
    store_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  StoreClient Client(int attempt) const {
    return StoreClient("127.0.0.1:" + std::to_string(port_), kToken, job_, attempt);
  }

  // Runs body(rank, communicator) on `world` threads, each in a fresh
  // attempt namespace so that groups never share store keys.
  void RunRanks(int world, const std::function<void(int, Communicator&)>& body) {
    const int attempt = next_attempt_++;
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        StoreClient client = Client(attempt);
        GroupSpec group{"world", {}, rank};
        for (int r = 0; r < world; ++r) group.members.push_back(r);
        auto comm = CreateCommunicator(CommBackend::kGloo, client, group);
        ASSERT_TRUE(comm.ok()) << comm.status();
        body(rank, **comm);  // a body without collectives may leave at once (Note [Connected before anyone leaves])
      });
    }
    for (auto& thread : threads) thread.join();
  }

 private:
  const std::string job_;
  RendezvousStore store_;
  int port_ = 0;
  int next_attempt_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

inline GptOptions TinyGpt() {
  GptOptions options;
  options.layers = 2;
  options.heads = 2;
  options.width = 16;
  options.sequence_length = 8;
  options.vocab_size = 32;
  return options;
}

// A two-layer Llama of width 16 (4 query heads, 2 key/value heads) for
// the vocabulary of TinyGpt.
inline LlamaOptions TinyLlama() {
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.intermediate = 24;
  options.heads = 4;
  options.kv_heads = 2;
  options.head_dim = 4;
  options.vocab_size = 32;
  return options;
}

// `rows` deterministic sequences starting at row `first_row`: (inputs, targets).
inline std::pair<torch::Tensor, torch::Tensor> Batch(int64_t first_row, int64_t rows) {
  torch::Tensor tokens = (torch::arange(first_row * 9, (first_row + rows) * 9) * 7 % 31).view({rows, 9});
  return {tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)};
}

inline std::vector<torch::Tensor> Parameters(Gpt& model) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : model->parameters()) copies.push_back(p.detach().to(torch::kFloat).clone());
  return copies;
}

inline double MaxDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

}  // namespace dslaunch::runtime::testing
