#!/usr/bin/env python3
"""NCCL's collectives through PyTorch, the reference for dscomm_bench.

  python3 -m torch.distributed.run --standalone --nproc_per_node G scripts/bench/pytorch_collectives.py \
      [--min_bytes 1048576] [--max_bytes 1073741824] [--iters 20] [--warmup 5] [--dtype float|bfloat16]

Same sizes, timing and bus-bandwidth factors as runtime/comm/dscomm_bench_main.cc
(nccl-tests' definitions), printed in the same columns.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min_bytes", type=int, default=1 << 20)
    parser.add_argument("--max_bytes", type=int, default=1 << 30)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--dtype", choices=["float", "bfloat16"], default="float")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = torch.float32 if args.dtype == "float" else torch.bfloat16
    element = 4 if args.dtype == "float" else 2
    if rank == 0:
        print(f"pytorch_collectives: {n} rank(s), nccl, {args.dtype}")
        print(f"{'op':<15} {'bytes':>14} {'time_us':>12} {'algbw_GB/s':>12} {'busbw_GB/s':>12}")
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        size = args.min_bytes
        while size <= args.max_bytes:
            elements = max(n, size // element // n * n)
            full = torch.full((elements,), float(rank + 1), device="cuda", dtype=dtype)
            part = torch.empty((elements // n,), device="cuda", dtype=dtype)
            if op == "all_reduce":
                call = lambda: dist.all_reduce(full)
            elif op == "reduce_scatter":
                call = lambda: dist.reduce_scatter_tensor(part, full)
            else:
                call = lambda: dist.all_gather_into_tensor(full, part)
            for _ in range(args.warmup):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                call()
            torch.cuda.synchronize()
            seconds = torch.tensor([(time.perf_counter() - start) / args.iters], device="cuda")
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            algbw = elements * element / seconds.item() / 1e9
            factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
            if rank == 0:
                print(f"{op:<15} {elements * element:>14} {seconds.item() * 1e6:>12.1f} {algbw:>12.4f} "
                      f"{algbw * factor:>12.4f}", flush=True)
            size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
