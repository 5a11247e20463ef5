// Example: train your own LibTorch model with the dslaunch runtime.
//
//   dslaunch --num_gpus 2 --no_local_rank build/bin/train_custom_model runtime/examples/ds_config.json [STEPS]
//
// A two-layer MLP learns y = sin(x0) + x1·x2 on synthetic data. Each
// data-parallel rank reads its own slice of every global batch; the engine
// averages gradients across ranks, so any number of ranks trains the same model.
#include <cstdio>
#include <cstdlib>

#include <dslaunch/runtime.h>

struct Regressor : torch::nn::Module {
  Regressor() {
    torch::manual_seed(0);  // the same initial weights on every rank
    hidden = register_module("hidden", torch::nn::Linear(3, 64));
    out = register_module("out", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::tanh(hidden(x))); }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

int main(int argc, char** argv) {
  using namespace dslaunch::runtime;
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_custom_model DS_CONFIG.json [STEPS]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  auto model = std::make_shared<Regressor>();
  auto initialized = Initialize(model, argv[1]);
  if (!initialized.ok()) {
    std::fprintf(stderr, "train_custom_model: %s\n", std::string(initialized.status().message()).c_str());
    return 1;
  }
  Session& session = **initialized;
  const int64_t micro = session.micro_batch_size();
  const int64_t accumulation = session.gradient_accumulation_steps();
  for (int step = 0; step < steps; ++step) {
    for (int64_t m = 0; m < accumulation; ++m) {
      // Every rank draws the same global batch and keeps its slice of it.
      auto generator = at::make_generator<at::CPUGeneratorImpl>(step * 1000 + m);
      torch::Tensor x = torch::rand({session.train_batch_size() / accumulation, 3}, generator) * 2 - 1;
      x = x.narrow(0, session.data_parallel_rank() * micro, micro).to(session.device());
      torch::Tensor y = torch::sin(x.select(1, 0)) + x.select(1, 1) * x.select(1, 2);
      torch::Tensor loss = torch::mse_loss(model->forward(x).squeeze(1), y);
      if (absl::Status s = session.Backward(loss); !s.ok()) {
        std::fprintf(stderr, "train_custom_model: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      if (auto s = session.Step(); !s.ok()) {
        std::fprintf(stderr, "train_custom_model: %s\n", std::string(s.status().message()).c_str());
        return 1;
      }
      if (session.rank() == 0 && m == 0 && (step + 1) % 50 == 0) {
        std::printf("step=%d loss=%.5f lr=%.3e\n", step + 1, loss.item<double>(), session.current_lr());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
