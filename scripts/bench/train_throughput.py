"""The training loop both PyTorch benchmarks measure (pytorch_gpt.py,
pytorch_llama.py): fused AdamW, bf16 autocast, optional torch.compile, random
tokens; prints tokens/s after `measure_from` warm-up steps and peak memory."""
import time

import torch


def measure(model, args, vocab, lr, betas, weight_decay):
    params = sum(p.numel() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters
    optimizer = torch.optim.AdamW(trainable, lr=lr, betas=betas, weight_decay=weight_decay, fused=True)
    step_fn = torch.compile(model) if args.compile else model
    tokens = torch.randint(vocab, (args.batch, args.sequence + 1), device="cuda")
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    torch.cuda.reset_peak_memory_stats()
    start = None
    for step in range(args.steps):
        if step == args.measure_from:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    measured = args.steps - args.measure_from
    print(f"tokens_per_s={measured * args.batch * args.sequence / seconds:.0f} "
          f"peak_gib={torch.cuda.max_memory_allocated() / 2**30:.2f} params={params} "
          f"trainable={sum(p.numel() for p in trainable)} loss={loss.item():.4f}")
