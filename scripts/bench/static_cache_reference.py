"""The PyTorch reference of generation_bench, written the way PyTorch users
write fast decoding (gpt-fast's recipe): a Llama with a static key/value
cache, the decode step under torch.compile(mode="reduce-overhead") so it
replays as CUDA graphs. Same shape and dtype as generation_bench --shape 7b,
random weights. Prints batch-1 decode tokens/s, eager and compiled.

  python3 scripts/bench/static_cache_reference.py [--decode_tokens 256] [--layers 32]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RmsNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, dim, heads, inter, max_len, dtype):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, inter, bias=False)
        self.w3 = nn.Linear(dim, inter, bias=False)
        self.w2 = nn.Linear(inter, dim, bias=False)
        self.attention_norm = RmsNorm(dim)
        self.ffn_norm = RmsNorm(dim)
        shape = (1, heads, max_len, dim // heads)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def forward(self, x, pos, cos, sin, mask):
        b, t, d = x.shape
        q, k, v = self.wqkv(self.attention_norm(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, layers, dim, heads, inter, vocab, max_len, dtype):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, inter, max_len, dtype) for _ in range(layers))
        self.norm = RmsNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)
        self.register_buffer("causal", torch.ones(max_len, max_len, dtype=torch.bool).tril(), persistent=False)

    def forward(self, tokens, pos):
        x = self.embed(tokens)
        cos, sin, mask = self.cos[pos], self.sin[pos], self.causal[None, None, pos]
        for block in self.blocks:
            x = block(x, pos, cos, sin, mask)
        return self.output(self.norm(x))


def decode_one(model, token, pos):
    logits = model(token, pos)
    return logits[:, -1].argmax(dim=-1, keepdim=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--decode_tokens", type=int, default=256)
    parser.add_argument("--prompt_tokens", type=int, default=128)
    args = parser.parse_args()
    dtype = torch.bfloat16
    max_len = args.prompt_tokens + args.decode_tokens + 16
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Llama(args.layers, 4096, 32, 11008, 32000, max_len, dtype).to(dtype).eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    prompt = torch.randint(0, 32000, (1, args.prompt_tokens), device="cuda")

    def run(step, label):
        with torch.no_grad():
            token = decode_one(model, prompt, torch.arange(args.prompt_tokens, device="cuda"))
            # Warm-up (compilation and graph capture happen here).
            for i in range(3):
                torch.compiler.cudagraph_mark_step_begin()
                token = step(model, token, torch.tensor([args.prompt_tokens + i], device="cuda")).clone()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for i in range(3, args.decode_tokens):
                torch.compiler.cudagraph_mark_step_begin()
                token = step(model, token, torch.tensor([args.prompt_tokens + i], device="cuda")).clone()
            torch.cuda.synchronize()
            rate = (args.decode_tokens - 3) / (time.perf_counter() - start)
        print(f"pytorch {torch.__version__} reference, static cache, {label}: {rate:.1f} tokens/s "
              f"({weights / 1e9:.2f} GB of weights)", flush=True)

    run(decode_one, "eager")
    compiled = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)
    run(compiled, "torch.compile reduce-overhead")


if __name__ == "__main__":
    main()
