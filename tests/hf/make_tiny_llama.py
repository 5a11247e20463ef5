"""Writes a tiny Hugging Face Llama-family model folder with random weights:
config.json and model.safetensors (or shards with model.safetensors.index.json),
as transformers' save_pretrained lays them out.

usage: make_tiny_llama.py OUT VARIANT [--dtype float32|bfloat16|float16] [--shards N] [--seed S]
       make_tiny_llama.py --batch FILE   (one folder per line of FILE, each line
  the arguments above: one process, since importing torch costs ~2 s of CPU)
variants: llama3_gqa (untied head, 4 KV heads of 8, rope_theta 500000 with llama3
rope_scaling), mistral_tied (tied embeddings, sliding_window), qwen2_bias (q/k/v
biases, rope_parameters of type linear), llama2_dynamic (dynamic NTK scaling),
llama2 (no scaling, Llama-2 keys), mixtral (4 SwiGLU experts, top-2, in every layer)."""
import argparse
import copy
import json
import math
import os
import shlex
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 384,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
    "use_cache": True, "transformers_version": "4.44.0",
}

VARIANTS = {
    "llama2": {},
    "llama3_gqa": {"num_key_value_heads": 4, "rope_theta": 500000.0,
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                   "bos_token_id": 128000, "eos_token_id": [128001, 128009]},
    "mistral_tied": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "tie_word_embeddings": True,
                     "num_key_value_heads": 2, "sliding_window": 4096, "rope_theta": 1000000.0},
    "qwen2_bias": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 2,
                   "use_sliding_window": False, "max_window_layers": 3,
                   "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}},
    "llama2_dynamic": {"rope_scaling": {"type": "dynamic", "factor": 4.0}, "max_position_embeddings": 8},
    "mixtral": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_key_value_heads": 2,
                "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
                "output_router_logits": False, "router_jitter_noise": 0.0, "sliding_window": None,
                "rope_theta": 1000000.0},
}


def build(variant, seed):
    config = dict(BASE)
    config.update(VARIANTS[variant])
    if variant == "qwen2_bias":
        del config["attention_bias"]
    g = torch.Generator().manual_seed(seed)
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads

    def normal(*shape, std=0.08):
        return torch.randn(*shape, generator=g) * std

    w = {"model.embed_tokens.weight": normal(v, h, std=0.5)}
    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "self_attn.q_proj.weight"] = normal(heads * d, h, std=0.25)
        w[p + "self_attn.k_proj.weight"] = normal(kv * d, h, std=0.25)
        w[p + "self_attn.v_proj.weight"] = normal(kv * d, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, heads * d)
        if config["model_type"] == "qwen2":
            w[p + "self_attn.q_proj.bias"] = normal(heads * d)
            w[p + "self_attn.k_proj.bias"] = normal(kv * d)
            w[p + "self_attn.v_proj.bias"] = normal(kv * d)
        if config["model_type"] == "mixtral":
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = normal(config["num_local_experts"], h, std=0.5)
            for e in range(config["num_local_experts"]):
                w[m + "experts.%d.w1.weight" % e] = normal(f, h)
                w[m + "experts.%d.w2.weight" % e] = normal(h, f)
                w[m + "experts.%d.w3.weight" % e] = normal(f, h)
        else:
            w[p + "mlp.gate_proj.weight"] = normal(f, h)
            w[p + "mlp.up_proj.weight"] = normal(f, h)
            w[p + "mlp.down_proj.weight"] = normal(h, f)
        w[p + "input_layernorm.weight"] = 1 + normal(h, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(h, std=0.1)
    w["model.norm.weight"] = 1 + normal(h, std=0.1)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = normal(v, h, std=0.5)
    return config, w


def save(out, config, weights, dtype, shards):
    os.makedirs(out, exist_ok=True)
    config = dict(config, torch_dtype=dtype)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    weights = {k: t.to(tdtype) for k, t in weights.items()}
    names = list(weights)
    if shards <= 1:
        safetensors_io.write(os.path.join(out, "model.safetensors"), weights, {"format": "pt"})
        return
    per = math.ceil(len(names) / shards)
    weight_map, total = {}, 0
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        file = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        safetensors_io.write(os.path.join(out, file), {n: weights[n] for n in part}, {"format": "pt"})
        for n in part:
            weight_map[n] = file
            total += weights[n].numel() * weights[n].element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    # Other sizes (benchmarks: a TinyLlama-shaped model is
    # --hidden 2048 --layers 22 --heads 32 --kv_heads 4 --intermediate 5632 --vocab 32000).
    for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "max_positions"):
        parser.add_argument("--" + key, type=int)
    args = parser.parse_args(argv)
    sizes = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
             "kv_heads": "num_key_value_heads", "intermediate": "intermediate_size", "vocab": "vocab_size",
             "max_positions": "max_position_embeddings"}
    for key, name in sizes.items():
        if getattr(args, key) is not None:
            BASE[name] = getattr(args, key)
            for variant in VARIANTS.values():
                variant.pop(name, None)
    config, weights = build(args.variant, args.seed)
    save(args.out, config, weights, args.dtype, args.shards)


def main_batch(path):
    base, variants = copy.deepcopy(BASE), copy.deepcopy(VARIANTS)
    with open(path) as f:
        for line in f:
            if line.strip():
                main(shlex.split(line))
                # Sizes given on one line are not the next line's defaults.
                BASE.clear(), BASE.update(copy.deepcopy(base))
                VARIANTS.clear(), VARIANTS.update(copy.deepcopy(variants))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--batch":
        main_batch(sys.argv[2])
    else:
        main()
