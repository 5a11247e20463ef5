#!/usr/bin/env python3
"""The PyTorch side of the throughput comparison (scripts/gpu-throughput-bench.sh).

The same GPT as dslaunch's (runtime/model/gpt.h: pre-LayerNorm blocks, biases,
tanh GELU, tied output head, learned positions), trained the way PyTorch users
do: fp32 parameters, bf16 autocast, fused AdamW, scaled-dot-product attention,
optionally torch.compile. Prints one line:
  tokens_per_s=... peak_gib=... params=...
Random tokens: throughput does not depend on the data.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_throughput  # noqa: E402


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.projection = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_projection = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_projection(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, heads, width, sequence, vocab):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.position_embedding = nn.Embedding(sequence, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if "norm" in name:
                continue
            if name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("projection.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):
        t = tokens.size(1)
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.final_norm(x), self.token_embedding.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--sequence", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--measure_from", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Gpt(args.layers, args.heads, args.width, args.sequence, args.vocab).cuda()
    train_throughput.measure(model, args, args.vocab, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)


if __name__ == "__main__":
    main()
