#!/usr/bin/env python3
"""The PyTorch side of the Llama throughput comparison (scripts/gpu-llama-bench.sh).

An HF-style Llama (RMSNorm, rotate-half RoPE, grouped-query attention through
scaled-dot-product attention, SwiGLU, untied head), trained the way PyTorch
users do: fp32 parameters, bf16 autocast, fused AdamW, optionally
torch.compile. A full fine-tune (every parameter trains), or with --lora R
the way PEFT users train LoRA: the base cast to bf16 and frozen, fp32
adapters (A kaiming-uniform, B zero, scale alpha/r) on q/k/v/o, autocast.
Prints one line:
  tokens_per_s=... peak_gib=... params=...
Random tokens: throughput does not depend on the data.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_throughput  # noqa: E402


class RmsNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LoraLinear(nn.Module):
    """A frozen base projection with a PEFT-style adapter: base(x) + B(A(x))·scale."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=5 ** 0.5)
        nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale


def apply_lora(model, r, alpha):
    model.to(torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(layer, name, LoraLinear(getattr(layer, name), r, alpha).to(torch.cuda.current_device()))
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()


class Layer(nn.Module):
    def __init__(self, width, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.input_layernorm = RmsNorm(width)
        self.q_proj = nn.Linear(width, heads * self.d, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, width, bias=False)
        self.post_attention_layernorm = RmsNorm(width)
        self.gate_proj = nn.Linear(width, ffn, bias=False)
        self.up_proj = nn.Linear(width, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(n).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(n).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Llama(nn.Module):
    def __init__(self, layers, width, heads, kv_heads, ffn, vocab, theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(Layer(width, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RmsNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        d = width // heads
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, d, 2).float() / d), persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, targets):
        t = tokens.size(1)
        x = self.embed_tokens(tokens)
        angles = torch.outer(torch.arange(t, device=tokens.device, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv_heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--sequence", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--measure_from", type=int, default=8)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank on q/k/v/o with a frozen bf16 base (0: full)")
    parser.add_argument("--lora_alpha", type=float, default=32)
    args = parser.parse_args()
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Llama(args.layers, args.width, args.heads, args.kv_heads, args.ffn, args.vocab).cuda()
    if args.lora:
        apply_lora(model, args.lora, args.lora_alpha)
    train_throughput.measure(model, args, args.vocab, lr=2e-5, betas=(0.9, 0.95), weight_decay=0.0)


if __name__ == "__main__":
    main()
