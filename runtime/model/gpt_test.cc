// The GPT: deterministic initialisation, the causal mask, and activation
// checkpointing that changes memory, not results.
#include "runtime/model/gpt.h"

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

GptOptions Small(int64_t checkpointed = 0, bool to_cpu = false) {
  GptOptions options;
  options.layers = 4;
  options.heads = 2;
  options.width = 16;
  options.sequence_length = 8;
  options.vocab_size = 40;
  options.dropout = 0.1;  // recomputation must redraw the same masks
  options.checkpointed_blocks = checkpointed;
  options.checkpoint_to_cpu = to_cpu;
  return options;
}

torch::Tensor Tokens() { return (torch::arange(2 * 9) * 5 % 39).view({2, 9}); }

TEST(Gpt, SameSeedSameWeights) {
  Gpt a(Small(), 3), b(Small(), 3), c(Small(), 4);
  auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  bool all_equal = true, any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    all_equal = all_equal && torch::equal(pa[i], pb[i]);
    any_differs = any_differs || !torch::equal(pa[i], pc[i]);
  }
  EXPECT_TRUE(all_equal);
  EXPECT_TRUE(any_differs);
}

TEST(Gpt, FutureTokensDoNotChangeEarlierLogits) {
  Gpt model(Small(), 1);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = Tokens().narrow(1, 0, 8);
  torch::Tensor changed = tokens.clone();
  changed.select(1, 7).fill_(3);
  torch::Tensor a = model->forward(tokens), b = model->forward(changed);
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 7), b.narrow(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(a.narrow(1, 7, 1), b.narrow(1, 7, 1)));
}

TEST(Gpt, ActivationCheckpointingGivesTheSameLossAndGradients) {
  for (auto [blocks, to_cpu] : {std::pair<int64_t, bool>{4, false}, {2, false}, {4, true}}) {
    Gpt plain(Small(), 9), checkpointed(Small(blocks, to_cpu), 9);
    torch::Tensor tokens = Tokens();
    torch::manual_seed(77);
    torch::Tensor plain_loss = plain->Loss(tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8));
    plain_loss.backward();
    torch::manual_seed(77);
    torch::Tensor loss = checkpointed->Loss(tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8));
    loss.backward();
    // CPU kernels are deterministic and the dropout masks are redrawn from the
    // same state, so recomputation reproduces the values exactly.
    EXPECT_EQ(plain_loss.item<float>(), loss.item<float>()) << blocks << " blocks";
    auto a = plain->parameters(), b = checkpointed->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(b[i].grad().defined());
      EXPECT_TRUE(torch::equal(a[i].grad(), b[i].grad())) << "parameter " << i << ", " << blocks << " blocks";
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
