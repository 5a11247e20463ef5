"""An independent Llama-family forward pass, written from the published
formulas of Hugging Face's Llama (../shared/MODELS.md), in PyTorch: the
reference dslaunch's model is compared with.

usage: llama_reference.py logits MODEL_DIR IDS [--compare FILE --atol A --rtol R]
  prints the logits' shape; with --compare, checks the F32 tensor "logits"
  of a safetensors file (dsgen --dump_logits) against the reference and exits
  1 when any element differs by more than atol + rtol * |reference|.
       llama_reference.py gradients MODEL_DIR IDS --compare FILE [--masked_prefix N] [--rtol R]
  the prompt as one training record (position i predicts token i+1, the
  first N targets ignored, the mean cross-entropy over the rest), its loss
  and every weight's gradient by autograd, checked against dsgen
  --dump_gradients: the loss within rtol, and each tensor's gradient within
  rtol of that tensor's largest reference gradient.
       llama_reference.py --batch FILE
  one check per line of FILE, each line OUTPUT followed by the arguments
  above: the check's report goes to OUTPUT and its exit status to
  OUTPUT.rc, all in one process (importing torch costs ~2 s of CPU)."""
import argparse
import contextlib
import json
import math
import os
import shlex
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def inverse_frequencies(config, d, seq_len):
    theta = config.get("rope_theta", 10000.0)
    scaling = config.get("rope_scaling")
    if config.get("rope_parameters"):
        scaling = config["rope_parameters"]
        theta = scaling.get("rope_theta", theta)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    exponents = torch.arange(0, d, 2, dtype=torch.int64).float() / d
    if kind == "dynamic":
        factor = scaling["factor"]
        max_pos = config["max_position_embeddings"]
        length = max(seq_len, max_pos)
        theta = theta * ((factor * length / max_pos) - (factor - 1)) ** (d / (d - 2))
    inv = 1.0 / (theta ** exponents)
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        context = scaling["original_max_position_embeddings"]
        out = []
        for f in inv.tolist():
            wavelength = 2 * math.pi / f
            if wavelength < context / high:
                out.append(f)
            elif wavelength > context / low:
                out.append(f / factor)
            else:
                smooth = (context / wavelength - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = torch.tensor(out, dtype=torch.float32)
    return inv


def rms_norm(x, weight, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def read_peft_adapter(folder):
    """A PEFT LoRA adapter folder as PEFT reads it: {module name: (A, B, scale)}."""
    config = json.load(open(os.path.join(folder, "adapter_config.json")))
    assert config["peft_type"] == "LORA" and config.get("bias", "none") == "none", config
    r, alpha = config["r"], config["lora_alpha"]
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    tensors = safetensors_io.read(os.path.join(folder, "adapter_model.safetensors"))
    prefix = "base_model.model."
    adapters = {}
    for key in tensors:
        assert key.startswith(prefix) and (key.endswith(".lora_A.weight") or key.endswith(".lora_B.weight")), key
        module = key[len(prefix):-len(".lora_A.weight")]
        if module not in adapters:
            a, b = tensors[prefix + module + ".lora_A.weight"], tensors[prefix + module + ".lora_B.weight"]
            assert a.shape[0] == r and b.shape[1] == r, (module, a.shape, b.shape)
            adapters[module] = (a.float(), b.float(), scale)
    return adapters


def sparse_moe(config, x, linear):
    """Mixtral's MixtralSparseMoeBlock, token by token: fp32 softmax over the
    router's logits, the top num_experts_per_tok, their weights renormalised,
    the weighted sum of those experts' SwiGLU outputs (no capacity, no drop)."""
    experts, k = config["num_local_experts"], config.get("num_experts_per_tok", 2)
    flat = x.reshape(-1, x.shape[-1])
    probs = torch.softmax(linear(flat, "gate").float(), dim=-1)
    weights, chosen = torch.topk(probs, k, dim=-1)
    weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for j in range(k):
            e = "experts.%d." % int(chosen[t, j])
            row = flat[t:t + 1]
            y = linear(torch.nn.functional.silu(linear(row, e + "w1")) * linear(row, e + "w3"), e + "w2")
            out[t] += weights[t, j] * y[0]
    assert experts > 0
    return out.reshape(x.shape)


def forward(config, w, ids, dtype=torch.float32, device="cpu", adapters=None):
    w = {k: v.to(device=device, dtype=dtype) for k, v in w.items()}
    adapters = dict(adapters or {})
    # Every adapter must name a projection of the model (an expert's runs
    # once per token routed to it, so adapters are looked up, not consumed).
    unknown = sorted(name for name in adapters if name + ".weight" not in w)
    assert not unknown, "adapters for modules the model does not have: %s" % unknown
    h, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    d = config.get("head_dim") or h // heads
    eps = config.get("rms_norm_eps", 1e-6)
    qwen2 = config["model_type"] == "qwen2"
    t = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids, device=device)]  # [t, h]
    inv = inverse_frequencies(config, d, t).to(device)
    angles = torch.outer(torch.arange(t, dtype=torch.float32, device=device), inv)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((t, t), float("-inf"), device=device).triu(1)

    def linear(x, name):
        y = x @ w[name + ".weight"].t()
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        if name in adapters:  # PEFT's unmerged LoRA: x·Aᵀ·Bᵀ·scale beside the frozen base
            a, b, scale = adapters[name]
            y = y + (x @ a.to(device, dtype).t()) @ b.to(device, dtype).t() * scale
        return y

    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        n = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(n, p + "self_attn.q_proj").view(t, heads, d).transpose(0, 1)
        k = linear(n, p + "self_attn.k_proj").view(t, kv, d).transpose(0, 1)
        v = linear(n, p + "self_attn.v_proj").view(t, kv, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = heads // kv
        k = k[:, None].expand(kv, group, t, d).reshape(heads, t, d)
        v = v[:, None].expand(kv, group, t, d).reshape(heads, t, d)
        if dtype != torch.float32 and hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            # 16-bit: as Hugging Face runs it (SDPA on 16-bit inputs).
            attention = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        else:
            scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(d) + mask
            attention = torch.softmax(scores, dim=-1).to(dtype) @ v
        x = x + linear(attention.transpose(0, 1).reshape(t, heads * d), p + "self_attn.o_proj")
        n = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if "num_local_experts" in config:
            x = x + sparse_moe(config, n, lambda t, name: linear(t, p + "block_sparse_moe." + name))
        else:
            gate = linear(n, p + "mlp.gate_proj")
            x = x + linear(torch.nn.functional.silu(gate) * linear(n, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
    return (x @ head.t()).float().cpu()


def check_gradients(config, weights, ids, args):
    weights = {k: v.float().requires_grad_() for k, v in weights.items()
               if not k.endswith(".rotary_emb.inv_freq")}
    if config.get("tie_word_embeddings"):
        weights.pop("lm_head.weight", None)
    logits = forward(config, weights, ids)
    targets = torch.tensor(ids[1:] + [-100])
    targets[:args.masked_prefix] = -100
    loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100)
    loss.backward()
    got = safetensors_io.read(args.compare)
    failures = []
    got_loss = got.pop("loss").item()
    if abs(got_loss - loss.item()) > args.rtol * abs(loss.item()):
        failures.append("loss %.8f, reference %.8f" % (got_loss, loss.item()))
    if sorted(got) != sorted(weights):
        failures.append("gradients of %s, reference has %s" % (sorted(set(got) - set(weights)), sorted(set(weights) - set(got))))
    worst, worst_name = 0.0, ""
    for name, weight in weights.items():
        if name not in got:
            continue
        reference = weight.grad
        scale = reference.abs().max().item()
        if scale == 0:
            failures.append("%s: the reference gradient is all zeros (nothing is checked)" % name)
            continue
        relative = (got[name].float() - reference).abs().max().item() / scale
        if relative > worst:
            worst, worst_name = relative, name
        if relative > args.rtol:
            failures.append("%s: gradient differs by %.2e of its largest element" % (name, relative))
    print("loss %.8f (dsgen %.8f); %d gradients, worst %.2e of the tensor's largest element (%s)"
          % (loss.item(), got_loss, len(weights), worst, worst_name))
    for failure in failures[:10]:
        print("FAIL: " + failure)
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["logits", "gradients"])
    parser.add_argument("model")
    parser.add_argument("ids")
    parser.add_argument("--adapter", help="a PEFT LoRA adapter folder applied on top of the model")
    parser.add_argument("--compare")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--masked_prefix", type=int, default=0)
    args = parser.parse_args(argv)
    config = json.load(open(os.path.join(args.model, "config.json")))
    weights = safetensors_io.read_folder(args.model)
    ids = [int(i) for i in args.ids.split(",")]
    if args.command == "gradients":
        return check_gradients(config, weights, ids, args)
    adapters = read_peft_adapter(args.adapter) if args.adapter else None
    if adapters:
        print("adapter: LoRA on %d modules" % len(adapters))
    reference = forward(config, {k: v.float() for k, v in weights.items()}, ids, adapters=adapters)
    print("reference logits", list(reference.shape))
    if args.compare:
        got = safetensors_io.read(args.compare)["logits"]
        if list(got.shape) != list(reference.shape):
            print("FAIL: shape %s, reference %s" % (list(got.shape), list(reference.shape)))
            return 1
        diff = (got - reference).abs()
        bound = args.atol + args.rtol * reference.abs()
        worst = diff.max().item()
        print("worst absolute difference %.3e (logits up to %.2f); atol %.0e rtol %.0e"
              % (worst, reference.abs().max().item(), args.atol, args.rtol))
        if (diff > bound).any():
            print("FAIL: %d of %d logits beyond the tolerance" % ((diff > bound).sum().item(), diff.numel()))
            return 1
    return 0


def main_batch(path):
    with open(path) as f:
        checks = [shlex.split(line) for line in f if line.strip()]
    for output, *argv in checks:
        with open(output, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                status = main(argv)
            except SystemExit as e:  # argparse
                status = e.code if isinstance(e.code, int) else 1
            except Exception:  # the report says why; the other checks still run
                traceback.print_exc()
                status = 1
        with open(output + ".rc", "w") as rc:
            rc.write("%d\n" % status)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--batch":
        sys.exit(main_batch(sys.argv[2]))
    sys.exit(main())
