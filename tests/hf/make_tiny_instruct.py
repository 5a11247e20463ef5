#!/usr/bin/env python3
"""A tiny instruction-tuning setup for the CPU (configs/llama-finetune-tiny.cfg):

  OUT/alpaca.jsonl   synthetic Stanford-Alpaca records (instruction, input,
                     output), simple enough that a small model learns them
  OUT/model/         a random Llama folder (tests/hf/make_tiny_llama.py, the
                     llama2 variant) whose vocabulary is that of
  OUT/sp.model       a SentencePiece BPE (Llama's ids: unk 0, bos 1, eos 2;
                     byte fallback) trained on the records by Debian's
                     spm_train, carried by the folder as
  OUT/model/tokenizer.json  in the form Llama-2 folders carry (BPE with byte
                     fallback, Prepend/Replace normalizer, a bos template),
                     its merges derived from the pieces' scores as Hugging
                     Face's conversion of a SentencePiece BPE does: every
                     split of a piece into two pieces, in the order of the
                     merged piece's rank.

Deterministic for a seed. Usage: make_tiny_instruct.py OUT [--records N] [--seed S]
"""
import argparse
import json
import os
import random
import subprocess
import sys

WORDS = ["apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "candle", "forest", "window",
         "garden", "silver", "rocket", "pencil", "castle", "orange", "violin", "planet", "bridge", "mirror"]
COLORS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "blood": "red", "sun": "yellow"}


def record(rng):
    kind = rng.randrange(5)
    if kind == 0:
        a, b = rng.randrange(10), rng.randrange(10)
        return {"instruction": "Add the two numbers.", "input": f"{a} {b}", "output": str(a + b)}
    if kind == 1:
        w = rng.choice(WORDS)
        return {"instruction": "Reverse the letters of the word.", "input": w, "output": w[::-1]}
    if kind == 2:
        w = rng.choice(WORDS)
        return {"instruction": "Repeat the word three times.", "input": w, "output": " ".join([w] * 3)}
    if kind == 3:
        thing = rng.choice(sorted(COLORS))
        return {"instruction": f"What color is the {thing}?", "input": "", "output": f"The {thing} is {COLORS[thing]}."}
    n = rng.randrange(2, 6)
    return {"instruction": "Count up from one.", "input": str(n), "output": " ".join(str(i) for i in range(1, n + 1))}


def tokenizer_json(vocab_file):
    pieces = [line.rstrip("\n").split("\t")[0] for line in open(vocab_file, encoding="utf-8")]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    specials = {"<unk>": 0, "<s>": 1, "</s>": 2}
    assert all(vocab[p] == i for p, i in specials.items()), pieces[:3]
    merges = []
    for merged, rank in sorted(vocab.items(), key=lambda item: item[1]):
        if merged in specials or (merged.startswith("<0x") and len(merged) == 6):
            continue
        splits = [(merged[:k], merged[k:]) for k in range(1, len(merged))
                  if merged[:k] in vocab and merged[k:] in vocab]
        merges += sorted(splits, key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for p, i in specials.items()]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--records", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=600)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    records = [record(rng) for _ in range(args.records)]
    with open(os.path.join(args.out, "alpaca.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    corpus = os.path.join(args.out, "corpus.txt")
    with open(corpus, "w") as f:
        for r in records:
            for key in ("instruction", "input", "output"):
                if r[key]:
                    f.write(r[key] + "\n")
        f.write("Below is an instruction that describes a task. Write a response that appropriately completes "
                "the request.\n### Instruction:\n### Input:\n### Response:\n")
    prefix = os.path.join(args.out, "sp")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={prefix}", f"--vocab_size={args.vocab}",
                    "--model_type=bpe", "--byte_fallback=true", "--unk_id=0", "--bos_id=1", "--eos_id=2",
                    "--pad_id=-1", "--num_threads=1", "--shuffle_input_sentence=false", "--character_coverage=1.0",
                    # Llama 2's normalization: none, spaces kept as they are, a dummy prefix.
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                    "--minloglevel=2"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.path.join(args.out, "model")
    subprocess.run([sys.executable, os.path.join(here, "make_tiny_llama.py"), model, "llama2", "--seed",
                    str(args.seed), "--vocab", str(args.vocab), "--max_positions", "256"], check=True)
    with open(os.path.join(model, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(prefix + ".vocab"), f, ensure_ascii=False)
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}, f, indent=2)
    print(f"{args.out}: {len(records)} records, a {args.vocab}-piece SentencePiece BPE, a random Llama folder")


if __name__ == "__main__":
    main()
